#!/usr/bin/env python3
"""Writes the hwloc v2 XML topologies of machines we do not have, for tests/affinity.

Linux numbering: core c of the machine has PU c and its hyperthread PU c + cores.
Run from this directory: ./generate.py; check each with `lstopo -i FILE.xml`.
"""


def bitmap(bits):
    """hwloc's bitmap text: 32-bit hex words, most significant first, comma-separated."""
    value = sum(1 << b for b in bits)
    words = []
    while True:
        words.append(value & 0xFFFFFFFF)
        value >>= 32
        if value == 0:
            break
    return ",".join("0x%08x" % w for w in reversed(words))


class Gp:
    n = 0

    @classmethod
    def next(cls):
        cls.n += 1
        return cls.n


def sets(cpus, nodes):
    c, n = bitmap(cpus), bitmap(nodes)
    return f'cpuset="{c}" complete_cpuset="{c}" nodeset="{n}" complete_nodeset="{n}"'


def machine(packages, cores_per_package, gpus_per_package, extra_pci=(), threads=2):
    """gpus_per_package: for each package, the PCI bus numbers of its GPUs; threads: per core (1 or 2)."""
    total = packages * cores_per_package
    all_pus = list(range(threads * total))
    lines = ['<?xml version="1.0" encoding="UTF-8"?>',
             '<!DOCTYPE topology SYSTEM "hwloc2.dtd">',
             '<topology version="2.0">',
             f'  <object type="Machine" os_index="0" {sets(all_pus, range(packages))} '
             f'allowed_cpuset="{bitmap(all_pus)}" allowed_nodeset="{bitmap(range(packages))}" gp_index="{Gp.next()}">']
    for p in range(packages):
        first = p * cores_per_package
        pus = [c for core in range(first, first + cores_per_package) for c in (core, core + total)[:threads]]
        lines.append(f'    <object type="Package" os_index="{p}" {sets(pus, [p])} gp_index="{Gp.next()}">')
        lines.append(f'      <object type="NUMANode" os_index="{p}" {sets(pus, [p])} gp_index="{Gp.next()}" '
                     f'local_memory="68719476736"/>')
        for core in range(first, first + cores_per_package):
            core_pus = [core, core + total][:threads]
            lines.append(f'      <object type="Core" os_index="{core}" {sets(core_pus, [p])} '
                         f'gp_index="{Gp.next()}">')
            for pu in core_pus:
                lines.append(f'        <object type="PU" os_index="{pu}" {sets([pu], [p])} gp_index="{Gp.next()}"/>')
            lines.append('      </object>')
        for bus in gpus_per_package[p]:
            lines += host_bridge(bus, "0302 [10de:2330] [10de:16c1] a1")
        lines.append('    </object>')
    for bus, pci_type in extra_pci:
        lines += host_bridge(bus, pci_type, indent='    ')
    lines += ['  </object>', '</topology>', '']
    return "\n".join(lines)


def host_bridge(bus, pci_type, indent='      '):
    return [f'{indent}<object type="Bridge" gp_index="{Gp.next()}" bridge_type="0-1" depth="0" '
            f'bridge_pci="0000:[{bus:02x}-{bus:02x}]">',
            f'{indent}  <object type="PCIDev" gp_index="{Gp.next()}" pci_busid="0000:{bus:02x}:00.0" '
            f'pci_type="{pci_type}"/>',
            f'{indent}</object>']


def write(name, text):
    Gp.n = 0
    with open(name, "w") as f:
        f.write(text)


if __name__ == "__main__":
    # 2 sockets x 8 cores x 2 threads, 4 GPUs per socket (a DGX-like layout).
    write("two_sockets_four_gpus_each.xml",
          machine(2, 8, [[0x19, 0x3b, 0x4c, 0x5d], [0x9b, 0xbb, 0xcb, 0xdb]]))
    # 1 socket x 32 cores x 2 threads, all 8 GPUs on it.
    write("one_socket_eight_gpus.xml",
          machine(1, 32, [[0x01, 0x21, 0x41, 0x61, 0x81, 0xa1, 0xc1, 0xe1]]))
    # 1 socket x 4 cores x 2 threads, a NIC and no GPU.
    write("no_gpus.xml", machine(1, 4, [[]], extra_pci=[(0x03, "0200 [8086:1572] [8086:0000] 01")]))
    # 1 socket x 2 cores, no hyperthreads: a CI machine (2 CPUs) with the sim backend's first
    # two devices (bus ids 0000:00:00.0 and 0000:01:00.0) beside it, for the server's own
    # placement test on the CPUs the machine really has (tests/client/placement.sh).
    write("two_cpus_two_gpus.xml", machine(1, 2, [[0x00, 0x01]], threads=1))
