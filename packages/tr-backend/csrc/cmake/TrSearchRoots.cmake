# tr_search_roots(<out> [VARS <variable>...] [SITE <suffix>...])
# Where to look for NVIDIA's headers and libraries: the value of each named variable (a CMake variable, else
# the environment variable of that name), then every site-packages directory of the build interpreter joined
# with each suffix (e.g. nvidia/nccl for the nvidia-nccl-cu13 wheel). Used by TrCudaLibs, TrNccl, TrCudnn.
include_guard(GLOBAL)

function(tr_search_roots out)
  cmake_parse_arguments(A "" "" "VARS;SITE" ${ARGN})
  set(roots "")
  foreach(var IN LISTS A_VARS)
    if(DEFINED ${var})
      list(APPEND roots "${${var}}")
    elseif(DEFINED ENV{${var}})
      list(APPEND roots "$ENV{${var}}")
    endif()
  endforeach()
  if(A_SITE)
    execute_process(
      COMMAND "${Python_EXECUTABLE}" -c [=[
import site, sysconfig
paths = [sysconfig.get_paths()["platlib"], sysconfig.get_paths()["purelib"], *site.getsitepackages()]
print(";".join(dict.fromkeys(paths)))
]=]
      OUTPUT_VARIABLE site_dirs OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
    if(rc EQUAL 0)
      foreach(dir IN LISTS site_dirs)
        foreach(suffix IN LISTS A_SITE)
          list(APPEND roots "${dir}/${suffix}")
        endforeach()
      endforeach()
    endif()
  endif()
  set(${out} "${roots}" PARENT_SCOPE)
endfunction()
