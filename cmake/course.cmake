# Helpers that give every stage the same shape (see docs/DESIGN.md and README.md).

# Compiler warnings for our own code; a warning is a defect here.
function(course_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion>
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra -Xptxas=-warn-spills,-warn-lmem-usage
                               -lineinfo --expt-relaxed-constexpr>)
endfunction()

# course_stage(<name>
#   LIBRARY   <sources>  the CPU reference and algorithm (and, with CUDA, the kernels): <name>_lib
#   CUDA      <sources>  kernels and launchers, compiled only when CUDA is available
#   MAIN      <source>   the stage's program, built as ./<name>
#   CPU_TESTS <sources>  doctest cases that need no GPU (CTest labels: <name>, cpu)
#   GPU_TESTS <sources>  doctest cases that run kernels (CTest labels: <name>, gpu; skip without a GPU)
#   DEPENDS   <targets>  an earlier stage's library, where this stage reuses it on purpose)
#
# `cmake --build build --target <name>` builds the stage alone: its program and its tests.
function(course_stage name)
  cmake_parse_arguments(S "" "MAIN" "LIBRARY;CUDA;CPU_TESTS;GPU_TESTS;DEPENDS" ${ARGN})
  # First, so that Ninja's alias for the name is this target and not the program's file bin/<name>.
  add_custom_target(${name})
  set(lib ${name}_lib)
  set(sources ${S_LIBRARY})
  if(COURSE_HAS_CUDA)
    list(APPEND sources ${S_CUDA})
  endif()
  add_library(${lib} STATIC ${sources})
  target_include_directories(${lib} PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
  target_link_libraries(${lib} PUBLIC course_common ${S_DEPENDS})
  course_warnings(${lib})

  add_executable(${name}_program ${S_MAIN})
  set_target_properties(${name}_program PROPERTIES OUTPUT_NAME ${name})
  target_link_libraries(${name}_program PRIVATE ${lib})
  course_warnings(${name}_program)
  set(stage_targets ${name}_program)

  if(S_CPU_TESTS)
    add_executable(test_${name}_cpu ${S_CPU_TESTS})
    target_link_libraries(test_${name}_cpu PRIVATE ${lib} course_test_main)
    course_warnings(test_${name}_cpu)
    add_test(NAME ${name}_cpu COMMAND test_${name}_cpu)
    set_tests_properties(${name}_cpu PROPERTIES LABELS "${name};cpu" TIMEOUT 600)
    list(APPEND stage_targets test_${name}_cpu)
  endif()
  if(S_GPU_TESTS)
    course_gpu_test(${name}_gpu LABELS ${name} SOURCES ${S_GPU_TESTS} LINK ${lib})
    if(TARGET test_${name}_gpu)
      list(APPEND stage_targets test_${name}_gpu)
    endif()
  endif()
  add_dependencies(${name} ${stage_targets})
endfunction()

# course_gpu_test(<test name> LABELS <labels> SOURCES <sources> LINK <targets>)
# A doctest executable whose main() exits with "skipped" (77) and says why when no GPU is usable.
# In a CPU-only build the test still exists, and says that it skipped because there is no CUDA.
function(course_gpu_test test)
  cmake_parse_arguments(T "" "" "LABELS;SOURCES;LINK" ${ARGN})
  if(COURSE_HAS_CUDA)
    add_executable(test_${test} ${T_SOURCES})
    target_link_libraries(test_${test} PRIVATE ${T_LINK} course_test_main_gpu)
    course_warnings(test_${test})
    add_test(NAME ${test} COMMAND test_${test})
  else()
    add_test(NAME ${test} COMMAND sh -c "echo 'SKIP: built without CUDA (no CUDA compiler at configure time)'; exit 77")
  endif()
  # RESOURCE_LOCK: ctest -j runs the GPU tests one at a time, since two processes cannot read the
  # hardware counters at once (CUPTI_ERROR_HARDWARE_BUSY) and timings would disturb each other.
  set_tests_properties(${test} PROPERTIES LABELS "${T_LABELS};gpu" SKIP_RETURN_CODE 77 TIMEOUT 900
                                          RESOURCE_LOCK gpu)
endfunction()
