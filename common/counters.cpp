#include "counters.hpp"

#include "gpu.hpp"

#if COURSE_HAS_CUPTI
#include <cuda.h>  // the CUcontext type only; the driver library itself is not linked
#include <cuda_runtime_api.h>
#include <cupti_profiler_host.h>
#include <cupti_profiler_target.h>
#include <cupti_range_profiler.h>
#include <cupti_result.h>
#include <cupti_target.h>

#include <cstdint>
#include <stdexcept>
#include <vector>

#include "check.hpp"
#include "timer.hpp"
#endif

namespace course {

namespace {
std::string g_disabled_reason;
bool g_disabled_excused = false;  // the reason is the machine's (see CounterResult::excused)
std::vector<std::string> g_extra_metrics;
}  // namespace

void disable_counters(const std::string& why) {
  g_disabled_reason = why;
  g_disabled_excused = true;  // the user's choice
}
void set_extra_metrics(const std::vector<std::string>& names) { g_extra_metrics = names; }

#if !COURSE_HAS_CUPTI

CounterResult measure_traffic(const std::function<void()>&) {
  CounterResult result;
  if (!g_disabled_reason.empty()) {
    result.why_not = g_disabled_reason;
    result.excused = g_disabled_excused;
  } else if (!gpu().available) {
    result.why_not = gpu().why_not;
    result.excused = true;
  } else {
    result.why_not = "built without CUPTI (not found in the CUDA Toolkit)";
  }
  return result;
}

#else

namespace {

const char* kMetrics[] = {"dram__bytes_read.sum", "dram__bytes_write.sum",
                          "l1tex__m_xbar2l1tex_read_bytes.sum",
                          "l1tex__m_l1tex2xbar_write_bytes.sum"};
constexpr size_t kMetricCount = sizeof(kMetrics) / sizeof(kMetrics[0]);

struct CuptiError : std::runtime_error {
  CUptiResult status;
  CuptiError(CUptiResult s, const std::string& message) : std::runtime_error(message), status(s) {}
};

void cupti_check(CUptiResult status, const char* call) {
  if (status == CUPTI_SUCCESS) return;
  const char* text = nullptr;
  cuptiGetResultString(status, &text);
  throw CuptiError(status, std::string(call) + " failed: " + (text ? text : "unknown CUPTI error"));
}
#define CUPTI_CHECK(call) cupti_check((call), #call)

// Every CUPTI parameter struct starts zeroed, with its size set.
template <class P>
P params(size_t struct_size) {
  P p{};
  p.structSize = struct_size;
  return p;
}
#define CUPTI_PARAMS(Type) params<Type>(Type##_STRUCT_SIZE)

// The current CUDA context, through the runtime's driver entry point, so that the program does
// not link the driver library and still starts on machines without a GPU.
CUcontext current_context() {
  CUDA_CHECK(cudaFree(nullptr));  // creates the primary context if needed
  using GetCurrent = CUresult (*)(CUcontext*);
  void* function = nullptr;
  cudaDriverEntryPointQueryResult found{};
  CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &function, 12000,
                                              cudaEnableDefault, &found));
  if (found != cudaDriverEntryPointSuccess || function == nullptr) {
    throw std::runtime_error("cuCtxGetCurrent not found in the CUDA driver");
  }
  CUcontext context = nullptr;
  if (reinterpret_cast<GetCurrent>(function)(&context) != CUDA_SUCCESS || context == nullptr) {
    throw std::runtime_error("no current CUDA context");
  }
  return context;
}

// What stays the same from one measurement to the next: the context, the host object that knows
// the chip's metrics, and the configuration image that schedules our four metrics.
struct Profiler {
  CUcontext context = nullptr;
  CUpti_Profiler_Host_Object* host = nullptr;
  std::vector<uint8_t> config;
  std::vector<std::string> extra_names;  // owned here: `metrics` points into them
  std::vector<const char*> metrics;      // kMetrics, then the extra metrics

  Profiler() : extra_names(g_extra_metrics) {
    metrics.assign(kMetrics, kMetrics + kMetricCount);
    for (const auto& name : extra_names) metrics.push_back(name.c_str());
    context = current_context();
    auto init = CUPTI_PARAMS(CUpti_Profiler_Initialize_Params);
    CUPTI_CHECK(cuptiProfilerInitialize(&init));

    auto chip = CUPTI_PARAMS(CUpti_Device_GetChipName_Params);
    chip.deviceIndex = 0;
    CUPTI_CHECK(cuptiDeviceGetChipName(&chip));

    auto availability = CUPTI_PARAMS(CUpti_Profiler_GetCounterAvailability_Params);
    availability.ctx = context;
    CUPTI_CHECK(cuptiProfilerGetCounterAvailability(&availability));
    std::vector<uint8_t> availability_image(availability.counterAvailabilityImageSize);
    availability.pCounterAvailabilityImage = availability_image.data();
    CUPTI_CHECK(cuptiProfilerGetCounterAvailability(&availability));

    auto host_init = CUPTI_PARAMS(CUpti_Profiler_Host_Initialize_Params);
    host_init.profilerType = CUPTI_PROFILER_TYPE_RANGE_PROFILER;
    host_init.pChipName = chip.pChipName;
    host_init.pCounterAvailabilityImage = availability_image.data();
    CUPTI_CHECK(cuptiProfilerHostInitialize(&host_init));
    host = host_init.pHostObject;

    // Our four metrics, then each extra one alone, so that a misspelt name can be named.
    for (size_t first = 0; first < metrics.size();) {
      const size_t count = first == 0 ? kMetricCount : 1;
      auto add = CUPTI_PARAMS(CUpti_Profiler_Host_ConfigAddMetrics_Params);
      add.pHostObject = host;
      add.ppMetricNames = metrics.data() + first;
      add.numMetrics = count;
      const CUptiResult status = cuptiProfilerHostConfigAddMetrics(&add);
      if (status != CUPTI_SUCCESS && first >= kMetricCount) {
        throw UsageError(std::string("--metrics: '") + metrics[first] +
                         "' is not a metric this GPU's profiler knows (see ncu --query-metrics)");
      }
      cupti_check(status, "cuptiProfilerHostConfigAddMetrics");
      first += count;
    }
    auto size = CUPTI_PARAMS(CUpti_Profiler_Host_GetConfigImageSize_Params);
    size.pHostObject = host;
    CUPTI_CHECK(cuptiProfilerHostGetConfigImageSize(&size));
    config.resize(size.configImageSize);
    auto image = CUPTI_PARAMS(CUpti_Profiler_Host_GetConfigImage_Params);
    image.pHostObject = host;
    image.pConfigImage = config.data();
    image.configImageSize = config.size();
    CUPTI_CHECK(cuptiProfilerHostGetConfigImage(&image));
  }

  // One measurement: enable the range profiler, replay `run` once per pass inside a single user
  // range, decode, evaluate, disable.
  Traffic measure(const std::function<void()>& run) {
    auto enable = CUPTI_PARAMS(CUpti_RangeProfiler_Enable_Params);
    enable.ctx = context;
    CUPTI_CHECK(cuptiRangeProfilerEnable(&enable));
    CUpti_RangeProfiler_Object* object = enable.pRangeProfilerObject;
    struct Disable {
      CUpti_RangeProfiler_Object* object;
      ~Disable() {
        auto p = CUPTI_PARAMS(CUpti_RangeProfiler_Disable_Params);
        p.pRangeProfilerObject = object;
        cuptiRangeProfilerDisable(&p);
      }
    } disable{object};

    auto data_size = CUPTI_PARAMS(CUpti_RangeProfiler_GetCounterDataSize_Params);
    data_size.pRangeProfilerObject = object;
    data_size.pMetricNames = metrics.data();
    data_size.numMetrics = metrics.size();
    data_size.maxNumOfRanges = 1;
    data_size.maxNumRangeTreeNodes = 1;
    CUPTI_CHECK(cuptiRangeProfilerGetCounterDataSize(&data_size));
    std::vector<uint8_t> counter_data(data_size.counterDataSize);
    auto data_init = CUPTI_PARAMS(CUpti_RangeProfiler_CounterDataImage_Initialize_Params);
    data_init.pRangeProfilerObject = object;
    data_init.pCounterData = counter_data.data();
    data_init.counterDataSize = counter_data.size();
    CUPTI_CHECK(cuptiRangeProfilerCounterDataImageInitialize(&data_init));

    auto set = CUPTI_PARAMS(CUpti_RangeProfiler_SetConfig_Params);
    set.pRangeProfilerObject = object;
    set.pConfig = config.data();
    set.configSize = config.size();
    set.pCounterDataImage = counter_data.data();
    set.counterDataImageSize = counter_data.size();
    set.range = CUPTI_UserRange;
    set.replayMode = CUPTI_UserReplay;
    set.maxRangesPerPass = 1;
    set.numNestingLevels = 1;
    set.minNestingLevel = 1;
    set.passIndex = 0;
    set.targetNestingLevel = 1;
    CUPTI_CHECK(cuptiRangeProfilerSetConfig(&set));

    bool all_passes = false;
    for (int pass = 0; !all_passes; ++pass) {
      if (pass == 16) throw std::runtime_error("CUPTI asked for more than 16 replay passes");
      flush_l2();
      CUDA_CHECK(cudaDeviceSynchronize());
      auto start = CUPTI_PARAMS(CUpti_RangeProfiler_Start_Params);
      start.pRangeProfilerObject = object;
      CUPTI_CHECK(cuptiRangeProfilerStart(&start));
      auto push = CUPTI_PARAMS(CUpti_RangeProfiler_PushRange_Params);
      push.pRangeProfilerObject = object;
      push.pRangeName = "measured";
      CUPTI_CHECK(cuptiRangeProfilerPushRange(&push));
      run();
      CUDA_CHECK(cudaDeviceSynchronize());
      auto pop = CUPTI_PARAMS(CUpti_RangeProfiler_PopRange_Params);
      pop.pRangeProfilerObject = object;
      CUPTI_CHECK(cuptiRangeProfilerPopRange(&pop));
      auto stop = CUPTI_PARAMS(CUpti_RangeProfiler_Stop_Params);
      stop.pRangeProfilerObject = object;
      CUPTI_CHECK(cuptiRangeProfilerStop(&stop));
      all_passes = stop.isAllPassSubmitted != 0;
    }

    auto decode = CUPTI_PARAMS(CUpti_RangeProfiler_DecodeData_Params);
    decode.pRangeProfilerObject = object;
    CUPTI_CHECK(cuptiRangeProfilerDecodeData(&decode));
    if (decode.numOfRangeDropped != 0) {
      throw CuptiError(CUPTI_ERROR_UNKNOWN, "the profiler dropped the measured range");
    }

    std::vector<double> values(metrics.size());
    auto evaluate = CUPTI_PARAMS(CUpti_Profiler_Host_EvaluateToGpuValues_Params);
    evaluate.pHostObject = host;
    evaluate.pCounterDataImage = counter_data.data();
    evaluate.counterDataImageSize = counter_data.size();
    evaluate.ppMetricNames = metrics.data();
    evaluate.numMetrics = metrics.size();
    evaluate.rangeIndex = 0;
    evaluate.pMetricValues = values.data();
    CUPTI_CHECK(cuptiProfilerHostEvaluateToGpuValues(&evaluate));

    Traffic traffic;
    traffic.dram_read_bytes = values[0];
    traffic.dram_write_bytes = values[1];
    traffic.l2_read_bytes = values[2];
    traffic.l2_write_bytes = values[3];
    for (size_t m = kMetricCount; m < metrics.size(); ++m) {
      traffic.extra.emplace_back(metrics[m], values[m]);
    }
    return traffic;
  }
};

// Stops measuring for the rest of the process, saying why (once, not at every row).
void give_up(const CuptiError& e) {
  g_disabled_excused = true;
  if (e.status == CUPTI_ERROR_INSUFFICIENT_PRIVILEGES) {
    g_disabled_reason = "the driver lets only administrators read GPU counters "
                        "(NVreg_RestrictProfilingToAdminUsers); run as root or see "
                        "https://developer.nvidia.com/ERR_NVGPUCTRPERM";
  } else if (e.status == CUPTI_ERROR_HARDWARE_BUSY || e.status == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
    // Another process holds the GPU's performance counters: a second program or test reading them
    // (the GPU tests take a CTest resource lock so that ctest -j runs them one at a time), or
    // Nsight Compute or Systems.
    g_disabled_reason = "counters unavailable: the GPU's profiler is busy with another process (another "
                        "program or test reading counters, or Nsight); run one at a time for the measured "
                        "columns (" + std::string(e.what()) + ")";
  } else {
    g_disabled_excused = false;
    g_disabled_reason = std::string("CUPTI counters unavailable: ") + e.what();
  }
}

}  // namespace

CounterResult measure_traffic(const std::function<void()>& run) {
  CounterResult result;
  if (!g_disabled_reason.empty()) {
    result.why_not = g_disabled_reason;
    result.excused = g_disabled_excused;
    return result;
  }
  if (!gpu().available) {
    result.why_not = gpu().why_not;
    result.excused = true;
    return result;
  }
  static Profiler* profiler = nullptr;  // set up once, lives until exit
  if (profiler == nullptr) {
    try {
      profiler = new Profiler();
    } catch (const UsageError&) {
      throw;  // a misspelt --metrics name is the user's to fix
    } catch (const CuptiError& e) {
      give_up(e);
    } catch (const std::exception& e) {
      g_disabled_reason = std::string("CUPTI counters unavailable: ") + e.what();
    }
  }
  if (profiler != nullptr) {
    try {
      result.traffic = profiler->measure(run);
      return result;
    } catch (const CuptiError& e) {  // CUDA errors (a faulting kernel) propagate as errors
      give_up(e);
    }
  }
  result.why_not = g_disabled_reason;  // said once; later calls stop at the top
  result.excused = g_disabled_excused;
  return result;
}

#endif  // COURSE_HAS_CUPTI

}  // namespace course
