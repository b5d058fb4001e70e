#include "funnel/affinity/cpu_list.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <iterator>
#include <stdexcept>

namespace funnel::affinity {

namespace {

unsigned parse_cpu(std::string_view whole, std::string_view number) {
  unsigned value = 0;
  const char* end = number.data() + number.size();
  auto [ptr, ec] = std::from_chars(number.data(), end, value);
  if (number.empty() || ec != std::errc{} || ptr != end)
    throw std::invalid_argument(fmt::format("bad CPU list '{}': '{}' is not a CPU number", whole, number));
  return value;
}

}  // namespace

CpuList parse_cpu_list(std::string_view text) {
  CpuList cpus;
  std::string_view rest = text;
  while (!rest.empty()) {
    const auto comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    const auto dash = item.find('-');
    const unsigned first = parse_cpu(text, item.substr(0, dash));
    const unsigned last = dash == std::string_view::npos ? first : parse_cpu(text, item.substr(dash + 1));
    if (last < first) throw std::invalid_argument(fmt::format("bad CPU list '{}': range '{}' runs backwards", text, item));
    for (unsigned cpu = first; cpu <= last; ++cpu) cpus.push_back(cpu);
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

std::string format_cpu_list(const CpuList& cpus) {
  std::string out;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += j == i ? fmt::format("{}", cpus[i]) : fmt::format("{}-{}", cpus[i], cpus[j]);
    i = j + 1;
  }
  return out;
}

CpuList cpu_union(const CpuList& a, const CpuList& b) {
  CpuList out;
  std::set_union(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
  return out;
}

bool intersects(const CpuList& a, const CpuList& b) {
  auto i = a.begin();
  auto j = b.begin();
  while (i != a.end() && j != b.end()) {
    if (*i == *j) return true;
    if (*i < *j) ++i; else ++j;
  }
  return false;
}

bool contains(const CpuList& set, unsigned cpu) { return std::binary_search(set.begin(), set.end(), cpu); }

}  // namespace funnel::affinity
