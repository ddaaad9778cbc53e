// Python bindings of the shim (`_tf_bfc_shim`): TensorFlow's BFC allocators as the adapter
// drives them (guarded_bfc_allocator.h), the AntMan layer (gpu_vmem_allocator.h,
// gpu_adjustable_allocator.h), TensorFlow's environment-variable readers and its log records.
//
// Threads: every call that takes a TensorFlow allocator's mutex releases the GIL first, and
// the Python sub-allocators and allocators are called back with the GIL taken again; so a
// thread blocked in TensorFlow (a retry wait, say) never holds the GIL, and a callback made
// under TensorFlow's mutex never waits for a thread that holds the GIL and wants that mutex.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "antman_env.h"
#include "bfc_private.h"
#include "errors.h"
#include "gpu_adjustable_allocator.h"
#include "gpu_vmem_allocator.h"
#include "guarded_bfc_allocator.h"
#include "python_allocator.h"
#include "python_sub_allocator.h"
#include "tensorflow/core/common_runtime/gpu/gpu_bfc_allocator.h"
#include "tf_log.h"
#include "xla/tsl/framework/allocator_retry.h"
#include "xla/tsl/framework/bfc_allocator.h"
#include "xla/tsl/util/env_var.h"

namespace py = pybind11;

namespace antman_tf {
namespace {

using BFCHandle = std::shared_ptr<GuardedBFCAllocator>;

// A sub-allocator that refuses everything: for the allocators built only to read what
// TensorFlow's constructors decide (GPUBFCAllocator's environment) or to call its inline
// helpers (BinNumForSize).
class RefusingSubAllocator final : public tsl::SubAllocator {
 public:
  RefusingSubAllocator() : SubAllocator({}, {}) {}
  void* Alloc(size_t, size_t, size_t*) override { return nullptr; }
  void Free(void*, size_t) override {}
  bool SupportsCoalescing() const override { return false; }
};

py::object Address(void* ptr) {
  return ptr == nullptr ? py::object(py::none())
                        : py::object(py::int_(reinterpret_cast<uintptr_t>(ptr)));
}

void* Pointer(uintptr_t address) { return reinterpret_cast<void*>(address); }

// `first_growth_region`: 0 keeps TensorFlow's first region under growth (2 MiB); another
// value replaces it, through the friend class, before the allocator is used (the diagnostic
// runtime adapters.tensorflow_bfc.first_region_1mib sets 1 MiB, TensorFlow 1.15's).
BFCHandle MakeBFC(py::object sub_allocator, size_t total_memory, const std::string& name,
                  int64_t retry_timeout_us, size_t first_growth_region,
                  const std::function<std::unique_ptr<tsl::BFCAllocator>(
                      std::unique_ptr<tsl::SubAllocator>)>& construct) {
  auto sub = std::make_unique<PythonSubAllocator>(std::move(sub_allocator), name);
  PythonSubAllocator* raw_sub = sub.get();
  std::unique_ptr<tsl::BFCAllocator> bfc;
  {
    py::gil_scoped_release release;  // TensorFlow's constructor logs and reads the environment
    bfc = construct(std::move(sub));
    if (first_growth_region != 0 && BFCPrivate::AllowGrowth(*bfc)) {
      BFCPrivate::SetNextRegionSize(
          *bfc, BFCPrivate::RoundedBytes(std::min(total_memory, first_growth_region)));
    }
  }
  return std::make_shared<GuardedBFCAllocator>(std::move(bfc), raw_sub, total_memory,
                                               retry_timeout_us);
}

BFCHandle MakePlainBFC(py::object sub_allocator, size_t total_memory, bool allow_growth,
                       const std::string& name, bool garbage_collection,
                       int64_t retry_timeout_us, size_t first_growth_region) {
  return MakeBFC(std::move(sub_allocator), total_memory, name, retry_timeout_us,
                 first_growth_region,
                 [&](std::unique_ptr<tsl::SubAllocator> sub) {
                   tsl::BFCAllocator::Options options;
                   options.allow_growth = allow_growth;
                   options.garbage_collection = garbage_collection;
                   return std::make_unique<tsl::BFCAllocator>(std::move(sub), total_memory, name,
                                                              options);
                 });
}

// tensorflow::GPUBFCAllocator: TensorFlow's constructor resolves allow_growth from
// TF_FORCE_GPU_ALLOW_GROWTH and garbage collection from TF_ENABLE_GPU_GARBAGE_COLLECTION.
BFCHandle MakeGPUBFC(py::object sub_allocator, size_t total_memory, const std::string& name,
                     bool allow_growth, int64_t retry_timeout_us, size_t first_growth_region) {
  return MakeBFC(std::move(sub_allocator), total_memory, name, retry_timeout_us,
                 first_growth_region,
                 [&](std::unique_ptr<tsl::SubAllocator> sub) {
                   tensorflow::GPUBFCAllocator::Options options;
                   options.allow_growth = allow_growth;
                   return std::make_unique<tensorflow::GPUBFCAllocator>(
                       std::move(sub), total_memory, name, options);
                 });
}

// Runs `call` (which releases the GIL itself), then raises what a Python sub-allocator's
// free raised meanwhile (TensorFlow frees regions in the middle of its own bookkeeping, so the
// error waits until TensorFlow's call is over); if `call` raised, that error is logged.
template <typename Call>
auto WithFreeErrors(std::initializer_list<const tsl::Allocator*> allocators, Call&& call) {
  auto subs = [&] {
    std::vector<PythonSubAllocator*> out;
    for (const tsl::Allocator* a : allocators) {
      if (auto* bfc = dynamic_cast<const GuardedBFCAllocator*>(a)) {
        out.push_back(bfc->sub_allocator());
      }
    }
    return out;
  };
  try {
    auto result = call();
    for (PythonSubAllocator* sub : subs()) sub->RaisePendingFreeError();
    return result;
  } catch (...) {
    for (PythonSubAllocator* sub : subs()) sub->LogPendingFreeError();
    throw;
  }
}

std::shared_ptr<tsl::Allocator> AsAllocator(const py::object& allocator) {
  if (py::isinstance<GuardedBFCAllocator>(allocator)) return allocator.cast<BFCHandle>();
  return std::make_shared<PythonAllocator>(allocator);
}

py::tuple MemoryMapTuple(const MemoryMapView& view) {
  py::list regions;
  for (const RegionView& r : view.regions) {
    py::list chunks;
    for (const ChunkView& c : r.chunks) {
      chunks.append(py::make_tuple(c.ptr, c.size, c.requested_size, c.in_use, c.allocation_id,
                                   c.in_use ? -1 : c.bin_num));
    }
    regions.append(py::make_tuple(r.ptr, r.size, chunks));
  }
  return py::make_tuple(view.memory_limit, view.pool_bytes, view.next_region_size, regions);
}

tsl::BFCAllocator& DefaultBFC() {
  static tsl::BFCAllocator* bfc = new tsl::BFCAllocator(
      std::make_unique<RefusingSubAllocator>(), 0, "bin_num_for_size",
      tsl::BFCAllocator::Options());
  return *bfc;
}

// 0: two-argument call; 1: attributes that retry; 2: no_retry_on_failure.
void* AllocateWithMode(tsl::Allocator& allocator, size_t alignment, size_t num_bytes,
                       int mode) {
  if (mode == 0) return allocator.AllocateRaw(alignment, num_bytes);
  const tsl::AllocationAttributes attributes(/*retry_on_failure=*/mode == 1,
                                             /*allocation_will_be_logged=*/false, nullptr);
  return allocator.AllocateRaw(alignment, num_bytes, attributes);
}

}  // namespace
}  // namespace antman_tf

PYBIND11_MODULE(_tf_bfc_shim, m) {
  using namespace antman_tf;
  m.doc() = "TensorFlow's compiled BFC allocator and AntMan's memory layer over it";
  m.attr("NUM_BINS") = BFCPrivate::kNumBins;
  InstallLogForwarder();

  m.def("_bind_python_types", [](py::object allocation_attributes, py::object allocator_stats,
                                 py::object invalid_pointer_error, py::object guard_error) {
    PythonTypes& types = PythonTypes::Get();
    types.allocation_attributes = std::move(allocation_attributes);
    types.allocator_stats = std::move(allocator_stats);
    types.invalid_pointer_error = std::move(invalid_pointer_error);
    static py::object* guard = new py::object(guard_error);  // for the translator below
    py::register_exception_translator([](std::exception_ptr error) {
      try {
        if (error) std::rethrow_exception(error);
      } catch (const GuardError& e) {
        PyErr_SetString(guard->ptr(), e.what());
      } catch (const InvalidPointer& e) {
        PyErr_SetString(PythonTypes::Get().invalid_pointer_error.ptr(), e.what());
      }
    });
  });

  // --- TensorFlow's log records -----------------------------------------------------------
  m.def("drain_log", [] {
    py::list out;
    for (LogRecord& r : DrainLogRecords()) {
      out.append(py::make_tuple(r.severity, r.verbosity, r.file, r.line, r.message));
    }
    return out;
  });
  m.def("log_pending", &LogRecordsPending);
  m.def("set_forwarded_min_severity", &SetForwardedMinSeverity);
  m.def("set_min_log_level", &SetMinLogLevel);

  // --- helpers ----------------------------------------------------------------------------
  m.def("rounded_bytes", [](size_t n) { return BFCPrivate::RoundedBytes(n); });
  m.def("bin_num_for_size", [](size_t n) { return BFCPrivate::BinNumForSize(DefaultBFC(), n); });
  m.def("backpedal_size", &BackpedalSize);

  // TensorFlow's readers: (the value TensorFlow leaves in its output, the Status message).
  m.def("read_bool_from_env_var", [](const std::string& name, bool default_value) {
    bool value = default_value;
    absl::Status status;
    {
      py::gil_scoped_release release;
      status = tsl::ReadBoolFromEnvVar(name, default_value, &value);
    }
    return std::make_pair(value, std::string(status.message()));
  });
  m.def("read_int64_from_env_var", [](const std::string& name, int64_t default_value) {
    int64_t value = default_value;
    absl::Status status;
    {
      py::gil_scoped_release release;
      status = tsl::ReadInt64FromEnvVar(name, default_value, &value);
    }
    return std::make_pair(value, std::string(status.message()));
  });
  // What tensorflow::GPUBFCAllocator's constructor resolves: (allow_growth, garbage_collection).
  m.def("gpu_bfc_options", [](bool allow_growth_option) {
    py::gil_scoped_release release;
    tensorflow::GPUBFCAllocator::Options options;
    options.allow_growth = allow_growth_option;
    tensorflow::GPUBFCAllocator bfc(std::make_unique<RefusingSubAllocator>(), 0,
                                    "gpu_bfc_options", options);
    return std::make_pair(BFCPrivate::AllowGrowth(bfc), BFCPrivate::GarbageCollection(bfc));
  });

  // --- TensorFlow's AllocatorRetry ----------------------------------------------------------
  py::class_<tsl::AllocatorRetry>(m, "AllocatorRetry")
      .def(py::init<>())
      .def("allocate_raw",
           [](tsl::AllocatorRetry& retry, py::function alloc_func, int64_t max_wait_us,
              size_t num_bytes) {
             void* ptr;
             {
               py::gil_scoped_release release;
               ptr = retry.AllocateRaw(
                   [&alloc_func](size_t, size_t, bool verbose) -> void* {
                     py::gil_scoped_acquire gil;
                     py::object result = alloc_func(verbose);
                     return result.is_none() ? nullptr : Pointer(result.cast<uintptr_t>());
                   },
                   static_cast<int>(max_wait_us / 1000), 0, num_bytes);
             }
             return Address(ptr);
           })
      .def("notify_dealloc", [](tsl::AllocatorRetry& retry) {
        py::gil_scoped_release release;
        retry.NotifyDealloc();
      });

  // --- TensorFlow's BFC allocators ----------------------------------------------------------
  py::class_<GuardedBFCAllocator, BFCHandle>(m, "BFC")
      .def_static("create", &MakePlainBFC)
      .def_static("create_gpu", &MakeGPUBFC)
      .def_property_readonly("name", &GuardedBFCAllocator::Name)
      .def_property_readonly("allow_growth",
                             [](const GuardedBFCAllocator& a) {
                               return BFCPrivate::AllowGrowth(a.bfc());
                             })
      .def_property_readonly("garbage_collection",
                             [](const GuardedBFCAllocator& a) {
                               return BFCPrivate::GarbageCollection(a.bfc());
                             })
      .def_property_readonly("retry_timeout_us", &GuardedBFCAllocator::retry_timeout_us)
      .def("allocate_raw",
           [](GuardedBFCAllocator& a, size_t alignment, size_t num_bytes, bool retry) {
             return Address(WithFreeErrors({&a}, [&] {
               py::gil_scoped_release release;
               return AllocateWithMode(a, alignment, num_bytes, retry ? 1 : 2);
             }));
           })
      .def("deallocate_raw",
           [](GuardedBFCAllocator& a, uintptr_t ptr) {
             py::gil_scoped_release release;
             a.DeallocateRaw(Pointer(ptr));
           })
      .def("requested_size",
           [](GuardedBFCAllocator& a, uintptr_t ptr) {
             py::gil_scoped_release release;
             return a.RequestedSize(Pointer(ptr));
           })
      .def("allocated_size",
           [](GuardedBFCAllocator& a, uintptr_t ptr) {
             py::gil_scoped_release release;
             return a.AllocatedSize(Pointer(ptr));
           })
      .def("allocation_id",
           [](GuardedBFCAllocator& a, uintptr_t ptr) {
             py::gil_scoped_release release;
             return a.AllocationId(Pointer(ptr));
           })
      .def("tracks_allocation_sizes", &GuardedBFCAllocator::TracksAllocationSizes)
      .def("get_stats",
           [](GuardedBFCAllocator& a) -> py::object {
             std::optional<tsl::AllocatorStats> stats;
             {
               py::gil_scoped_release release;
               stats = a.GetStats();
             }
             return stats ? StatsToPython(*stats) : py::object(py::none());
           })
      .def("clear_stats",
           [](GuardedBFCAllocator& a) {
             py::gil_scoped_release release;
             return a.ClearStats();
           })
      .def("memory_map",
           [](GuardedBFCAllocator& a) {
             MemoryMapView view;
             {
               py::gil_scoped_release release;
               view = BFCPrivate::MemoryMap(a.bfc());
             }
             return MemoryMapTuple(view);
           })
      .def("bin_debug_info", [](GuardedBFCAllocator& a) {
        BFCPrivate::BinDebugArray infos;
        {
          py::gil_scoped_release release;
          infos = BFCPrivate::BinDebugInfo(a.bfc());
        }
        py::list out;
        for (const BinDebugView& b : infos) {
          out.append(py::make_tuple(b.total_bytes_in_use, b.total_bytes_in_bin,
                                    b.total_requested_bytes_in_use, b.total_chunks_in_use,
                                    b.total_chunks_in_bin));
        }
        return out;
      });

  // --- AntMan: GPUVMemAllocator -------------------------------------------------------------
  py::class_<GPUVMemAllocator, std::shared_ptr<GPUVMemAllocator>>(m, "GPUVMem")
      .def(py::init([](py::object device, py::object host, int tf_gpu_id,
                       int64_t physical_total_memory) {
        std::shared_ptr<tsl::Allocator> d = AsAllocator(device), h = AsAllocator(host);
        py::gil_scoped_release release;  // the constructor reads the environment and may log
        return std::make_shared<GPUVMemAllocator>(std::move(d), std::move(h), tf_gpu_id,
                                                  physical_total_memory);
      }))
      // (vmem, host BFC) or None when TF_GPU_VMEM is false.
      .def_static("maybe_create",
                  [](py::object gpu_allocator, py::object host_sub_allocator, int tf_gpu_id,
                     int64_t physical_total_memory, int64_t retry_timeout_us,
                     size_t first_growth_region) -> py::object {
                    BFCHandle host;
                    auto make_host = [&](size_t limit, const std::string& name) {
                      py::gil_scoped_acquire gil;
                      host = MakePlainBFC(host_sub_allocator, limit, /*allow_growth=*/true,
                                          name, /*garbage_collection=*/false, retry_timeout_us,
                                          first_growth_region);
                      return std::static_pointer_cast<tsl::Allocator>(host);
                    };
                    std::shared_ptr<tsl::Allocator> gpu = AsAllocator(gpu_allocator);
                    std::unique_ptr<GPUVMemAllocator> vmem;
                    {
                      py::gil_scoped_release release;
                      vmem = MaybeCreateGPUVMemAllocator(std::move(gpu), make_host, tf_gpu_id,
                                                         physical_total_memory);
                    }
                    if (!vmem) return py::none();
                    return py::make_tuple(std::shared_ptr<GPUVMemAllocator>(std::move(vmem)),
                                          host);
                  })
      .def_property_readonly("name", &GPUVMemAllocator::Name)
      .def_property_readonly("memory_planned", &GPUVMemAllocator::memory_planned)
      .def("allocate_raw",
           [](GPUVMemAllocator& v, size_t alignment, size_t num_bytes, int mode) {
             return Address(WithFreeErrors({v.device_allocator(), v.host_allocator()}, [&] {
               py::gil_scoped_release release;
               return AllocateWithMode(v, alignment, num_bytes, mode);
             }));
           })
      .def("deallocate_raw",
           [](GPUVMemAllocator& v, uintptr_t ptr) {
             py::gil_scoped_release release;
             v.DeallocateRaw(Pointer(ptr));
           })
      .def("requested_size",
           [](GPUVMemAllocator& v, uintptr_t ptr) {
             py::gil_scoped_release release;
             return v.RequestedSize(Pointer(ptr));
           })
      .def("allocated_size",
           [](GPUVMemAllocator& v, uintptr_t ptr) {
             py::gil_scoped_release release;
             return v.AllocatedSize(Pointer(ptr));
           })
      .def("allocation_id",
           [](GPUVMemAllocator& v, uintptr_t ptr) {
             py::gil_scoped_release release;
             return v.AllocationId(Pointer(ptr));
           })
      .def("tracks_allocation_sizes",
           [](GPUVMemAllocator& v) {
             py::gil_scoped_release release;
             return v.TracksAllocationSizes();
           })
      .def("get_stats",
           [](GPUVMemAllocator& v) -> py::object {
             std::optional<tsl::AllocatorStats> stats;
             {
               py::gil_scoped_release release;
               stats = v.GetStats();
             }
             return stats ? StatsToPython(*stats) : py::object(py::none());
           })
      .def("clear_stats", [](GPUVMemAllocator& v) {
        py::gil_scoped_release release;
        return v.ClearStats();
      });

  // --- AntMan: GPUAdjustableAllocator -------------------------------------------------------
  py::class_<GPUAdjustableAllocator>(m, "GPUAdjustable")
      .def(py::init<>())
      .def("adjust_memory_limit",
           [](GPUAdjustableAllocator& adj, size_t new_limit, GuardedBFCAllocator& bfc) {
             return WithFreeErrors({&bfc}, [&] {
               py::gil_scoped_release release;
               return adj.AdjustMemoryLimit(new_limit, &bfc.bfc());
             });
           })
      .def("free_empty_memory",
           [](GPUAdjustableAllocator& adj, size_t target, GuardedBFCAllocator& bfc) {
             return WithFreeErrors({&bfc}, [&] {
               py::gil_scoped_release release;
               return adj.FreeEmptyMemory(target, &bfc.bfc());
             });
           })
      .def("get_mem_pool_stats", [](GPUAdjustableAllocator& adj, GuardedBFCAllocator& bfc) {
        MemPoolStats stats;
        {
          py::gil_scoped_release release;
          stats = adj.GetMemPoolStats(&bfc.bfc());
        }
        return py::make_tuple(stats.pool_bytes, stats.stable_bytes);
      });
}
