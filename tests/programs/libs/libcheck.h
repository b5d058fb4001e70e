// libcheck.h: the checking code that the library test programs of this folder share (header-only,
// for nvcc .cu files and host-only .cpp files alike). Include it AFTER the CUDA headers: the
// runtime part needs cuda_runtime.h (CUDART_VERSION), the driver part cuda.h (CUDA_VERSION).
//
//  - Failed API calls: LIBCHECK_CALL builds a library's *_CHECK macro; it prints
//      ERROR <call> at <file>:<line>: <name> (<detail>)
//    to stdout and exits 2. CUDA_CHECK (runtime) and CU_CHECK (driver API) are defined here;
//    library-specific status-name tables stay in their program.
//  - Wrong results: libcheck::fail (printf a FAIL line, exit 1), libcheck::expect (a
//    "<lib> <what>: ok" line or "FAIL <lib> <what>", exit 1) and libcheck::check_rel_err (the
//    "max rel err" lines).
//  - libcheck::rel_err: max |g - r| / max |r| over two vectors, real or complex.
//  - Deterministic data: libcheck::val / libcheck::fill (values in [-1, 1]); libcheck::to_dev
//    (runtime only; a failure in it names libcheck.h as the place).
// Everything prints to stdout, as the programs' expected output is compared line by line.
#pragma once

#include <cmath>
#include <complex>
#include <cstdarg>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace libcheck {

// ---- failed API calls (exit status 2) ----

// "ERROR <call> at <file>:<line>: <name> (<detail>)", then exit 2.
[[noreturn]] inline void call_failed(const char* call, const char* file, int line, const char* name,
                                     const char* detail) {
  std::printf("ERROR %s at %s:%d: %s (%s)\n", call, file, line, name, detail);
  std::exit(2);
}
// The same with the status code as the detail: "... <name> (<code>)".
[[noreturn]] inline void call_failed(const char* call, const char* file, int line, const char* name,
                                     int code) {
  std::printf("ERROR %s at %s:%d: %s (%d)\n", call, file, line, name, code);
  std::exit(2);
}
// The same without a detail: "... <name>" (detail_of = libcheck::no_detail).
[[noreturn]] inline void call_failed(const char* call, const char* file, int line, const char* name,
                                     std::nullptr_t) {
  std::printf("ERROR %s at %s:%d: %s\n", call, file, line, name);
  std::exit(2);
}
template <typename Status>
inline std::nullptr_t no_detail(Status) { return nullptr; }

}  // namespace libcheck

// LIBCHECK_CALL(text, call, Status, ok, name_of, detail_of): evaluates call once; unless it returns
// ok, prints ERROR text at __FILE__:__LINE__ with name_of(status) and detail_of(status) (a string,
// an int such as int(status), or libcheck::no_detail), and exits 2. The *_CHECK macros pass #call
// themselves, so that the text is the call as written (cuda.h renames many functions by macro).
#define LIBCHECK_CALL(text, call, Status, ok, name_of, detail_of)                       \
  do {                                                                                 \
    Status s_ = (call);                                                                \
    if (s_ != (ok))                                                                    \
      ::libcheck::call_failed(text, __FILE__, __LINE__, name_of(s_), detail_of(s_));   \
  } while (0)

#ifdef CUDART_VERSION  // runtime API
#define CUDA_CHECK(call) \
  LIBCHECK_CALL(#call, call, cudaError_t, cudaSuccess, cudaGetErrorName, cudaGetErrorString)
#endif

#ifdef CUDA_VERSION  // driver API
namespace libcheck {
// cuGetErrorName / cuGetErrorString as values ("?" if the call leaves the pointer alone).
inline const char* cu_error_name(CUresult r) {
  const char* n = "?";
  cuGetErrorName(r, &n);
  return n;
}
inline const char* cu_error_string(CUresult r) {
  const char* s = "?";
  cuGetErrorString(r, &s);
  return s;
}
}  // namespace libcheck
#define CU_CHECK(call)                                                          \
  LIBCHECK_CALL(#call, call, CUresult, CUDA_SUCCESS, ::libcheck::cu_error_name, \
                ::libcheck::cu_error_string)
#endif

namespace libcheck {

// ---- wrong results (exit status 1) ----

// printf(fmt, ...) (the format holds the whole line, "FAIL ..." and the newline), then exit 1.
[[noreturn]] inline void fail(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
inline void fail(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::vprintf(fmt, ap);
  va_end(ap);
  std::exit(1);
}

// "<lib> <what>: ok" if ok, else "FAIL <lib> <what>" and exit 1.
inline void expect(const char* lib, bool ok, const char* what) {
  if (!ok) fail("FAIL %s %s\n", lib, what);
  std::printf("%s %s: ok\n", lib, what);
}

// "<lib> <what>: ok (max rel err < <tol>)" if err < tol, else
// "FAIL <lib> <what>: max rel err <err> >= <tol>" and exit 1. tol is given as text ("1e-4"), as
// printed; its value is that text read as a double.
inline void check_rel_err(const char* lib, const char* what, double err, const char* tol) {
  if (!(err < std::strtod(tol, nullptr)))
    fail("FAIL %s %s: max rel err %.3e >= %s\n", lib, what, err, tol);
  std::printf("%s %s: ok (max rel err < %s)\n", lib, what, tol);
}

// max |g[i] - r[i]| / max |r[i]| over i < r.size() (g at least as long), in double or
// std::complex<double> (R); the denominator is at least 1e-300.
template <typename G, typename R>
inline double rel_err(const std::vector<G>& g, const std::vector<R>& r) {
  double num = 0, den = 1e-300;
  for (size_t i = 0; i < r.size(); ++i) {
    num = std::fmax(num, std::abs(R(g[i]) - r[i]));
    den = std::fmax(den, std::abs(r[i]));
  }
  return num / den;
}

// ---- deterministic data ----

// Deterministic values in [-1, 1] (multiples of 0.01).
inline float val(int i, int seed) { return ((i * 7919 + seed * 104729) % 201 - 100) / 100.0f; }
inline std::vector<float> fill(int n, int seed) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = val(i, seed);
  return v;
}

#ifdef CUDART_VERSION
// A cudaMalloc copy of h (cudaMemcpy, synchronous).
template <typename T>
inline T* to_dev(const std::vector<T>& h) {
  T* d = nullptr;
  CUDA_CHECK(cudaMalloc(&d, h.size() * sizeof(T)));
  CUDA_CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}
#endif

}  // namespace libcheck
