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
#   DEPENDS   <targets>  an earlier stage's library, where this stage reuses it on purpose
#   HOPPER               the CUDA sources use Hopper-only instructions (wgmma, setmaxnreg): they
#                        are built for sm_90a alone (and only with nvcc 12 or newer); the library
#                        defines COURSE_HAS_HOPPER; the GPU tests skip on any other GPU)
#
# `cmake --build build --target <name>` builds the stage alone: its program and its tests.
function(course_stage name)
  cmake_parse_arguments(S "HOPPER" "MAIN" "LIBRARY;CUDA;CPU_TESTS;GPU_TESTS;DEPENDS" ${ARGN})
  # First, so that Ninja's alias for the name is this target and not the program's file bin/<name>.
  add_custom_target(${name})
  set(lib ${name}_lib)
  set(sources ${S_LIBRARY})
  set(with_cuda ${COURSE_HAS_CUDA})
  if(S_HOPPER AND COURSE_HAS_CUDA AND CMAKE_CUDA_COMPILER_VERSION VERSION_LESS 12.0)
    message(STATUS "${name}: nvcc ${CMAKE_CUDA_COMPILER_VERSION} cannot build sm_90a: CPU parts only")
    set(with_cuda OFF)
  endif()
  if(with_cuda)
    list(APPEND sources ${S_CUDA})
  endif()
  add_library(${lib} STATIC ${sources})
  target_include_directories(${lib} PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
  target_link_libraries(${lib} PUBLIC course_common ${S_DEPENDS})
  course_warnings(${lib})
  set(test_main course_test_main_gpu)
  if(S_HOPPER)
    # sm_90a only (written -gencode=arch=compute_90a,code=sm_90a by CMake): the "a" target is the
    # one with wgmma and setmaxnreg, and its code runs on sm_90 GPUs alone.
    set_target_properties(${lib} PROPERTIES CUDA_ARCHITECTURES 90a-real)
    target_compile_definitions(${lib} PUBLIC COURSE_HAS_HOPPER=$<BOOL:${with_cuda}>)
    set(test_main course_test_main_hopper)
  endif()

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
    course_gpu_test(${name}_gpu LABELS ${name} SOURCES ${S_GPU_TESTS} LINK ${lib} MAIN ${test_main}
                    BUILD ${with_cuda})
    if(TARGET test_${name}_gpu)
      list(APPEND stage_targets test_${name}_gpu)
    endif()
  endif()
  add_dependencies(${name} ${stage_targets})
endfunction()

# course_gpu_test(<test name> LABELS <labels> SOURCES <sources> LINK <targets> [MAIN <main>]
#                 [BUILD <bool>])
# A doctest executable whose main() exits with "skipped" (77) and says why when no GPU is usable
# (MAIN: course_test_main_gpu, or course_test_main_hopper for sm_90a-only kernels). In a CPU-only
# build (or BUILD OFF) the test still exists, and says that it skipped because there is no CUDA.
function(course_gpu_test test)
  cmake_parse_arguments(T "" "MAIN;BUILD" "LABELS;SOURCES;LINK" ${ARGN})
  if(NOT T_MAIN)
    set(T_MAIN course_test_main_gpu)
  endif()
  if(NOT DEFINED T_BUILD)
    set(T_BUILD ${COURSE_HAS_CUDA})
  endif()
  if(T_BUILD)
    add_executable(test_${test} ${T_SOURCES})
    target_link_libraries(test_${test} PRIVATE ${T_LINK} ${T_MAIN})
    course_warnings(test_${test})
    # Its test cases in processes of their own, several at once (scripts/run_gpu_cases.sh).
    add_test(NAME ${test} COMMAND ${CMAKE_SOURCE_DIR}/scripts/run_gpu_cases.sh $<TARGET_FILE:test_${test}>)
  else()
    add_test(NAME ${test} COMMAND sh -c "echo 'SKIP: built without CUDA (no CUDA compiler at configure time)'; exit 77")
  endif()
  # RESOURCE_LOCK: ctest -j runs the GPU test programs one at a time (each runs its own cases
  # several at once, and those that read the hardware counters alone: two processes cannot read
  # them at once, CUPTI_ERROR_HARDWARE_BUSY).
  set_tests_properties(${test} PROPERTIES LABELS "${T_LABELS};gpu" SKIP_RETURN_CODE 77 TIMEOUT 900
                                          RESOURCE_LOCK gpu)
endfunction()
