#!/usr/bin/env bash
# driver_launch.sh BIN_DIR PROGRAM MODULE [PRELOAD]: a module image loaded and launched through funnel's
# driver front (programs/driver_launch.cpp) on the sim backend; the launch reached the server
# as the program made it: kernel, grid, block and parameter bytes (the sim's launch log).
set -u
bin=$1 prog=$2 module=$3 preload=${4:-}
# shellcheck source=tests/client/sim_env.sh
. "$(dirname "$0")/sim_env.sh"
sim_env "$bin" "$preload"
timeout 60 "$bin/funnel-run" "$prog" "$module" >"$dir/out" 2>"$dir/err"
rc=$?
cat "$dir/out"
if [ "$rc" -ne 0 ] || ! grep -qx "done" "$dir/out" || grep -q "FAIL" "$dir/out"; then
  echo "FAIL: the program exited $rc; stderr:"; cat "$dir/err"; exit 1
fi
ptr=$(sed -n 's/^launched with pointer 0x\([0-9a-f]*\)$/\1/p' "$dir/out")
python3 - "$FUNNEL_SIM_LAUNCH_LOG" "$ptr" <<'PY' || exit 1
import json, struct, sys
log, ptr = sys.argv[1], int(sys.argv[2], 16)
launches = [json.loads(l) for l in open(log)]
want = struct.pack("<Qfi", ptr, 2.5, 512).hex()
got = sorted((l["grid"][0], l["block"][0]) for l in launches if l["kernel"] == "scale" and l["params"] == want
             and l["grid"][1:] == [1, 1] and l["block"][1:] == [1, 1])
# cuModuleGetFunction's function <<<4, 128>>>, with its parameters in one buffer (`extra`)
# <<<5, 16>>> and through cuLaunchKernelEx <<<6, 8>>>, then cuLibraryGetKernel's, through
# cuKernelGetFunction <<<2, 64>>> and as the CUkernel itself <<<3, 32>>>.
if got != [(2, 64), (3, 32), (4, 128), (5, 16), (6, 8)] or len(launches) != 5:
    print(f"FAIL: launches {launches}, want scale <<<4,128>>>, <<<5,16>>>, <<<6,8>>>, <<<2,64>>>, <<<3,32>>> "
          f"with params {want}")
    sys.exit(1)
print(f"PASS: the server launched scale<<<4, 128>>>, <<<5, 16>>>, <<<6, 8>>>, <<<2, 64>>> and <<<3, 32>>> with the "
      f"parameters the program passed ({want})")
PY
