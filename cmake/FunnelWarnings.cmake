# One place for warnings and sanitizers; every funnel target calls funnel_target_defaults().
function(funnel_target_defaults target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion
      -Wnon-virtual-dtor -Wold-style-cast -Wcast-align -Wnull-dereference -Wdouble-promotion -Wformat=2>)
  if(FUNNEL_WERROR)
    # -Wnull-dereference stays a warning: at -O2 GCC 12 reports false positives inside
    # libstdc++ (<streambuf> inlined into std::ostringstream users).
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror -Wno-error=null-dereference -Wno-error=array-bounds -Wno-error=stringop-overflow>)
  endif()
endfunction()

if(FUNNEL_SANITIZE)
  # C and C++ only: nvcc-built test programs stay uninstrumented (nvcc rejects the flags);
  # the tests preload the sanitizer runtime for them instead.
  add_compile_options($<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=${FUNNEL_SANITIZE}>
                      $<$<COMPILE_LANGUAGE:C,CXX>:-fno-omit-frame-pointer>
                      $<$<COMPILE_LANGUAGE:C,CXX>:-fno-sanitize-recover=all>)
  add_link_options($<$<LINK_LANGUAGE:C,CXX>:-fsanitize=${FUNNEL_SANITIZE}>)
endif()
