// A tsl::Allocator over a Python allocator object (SPEC.md API-3 `Allocator`), so that the
// AntMan layer, which holds tsl::Allocator pointers as AntMan's C++ does, also runs over
// allocators written in Python (the suite's recording proxies, say). Every method takes the
// GIL and calls the object's method of the same name; a Python InvalidPointerError becomes
// antman_tf::InvalidPointer, any other exception propagates.
#ifndef ANTMAN_TF_BFC_PYTHON_ALLOCATOR_H_
#define ANTMAN_TF_BFC_PYTHON_ALLOCATOR_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include <pybind11/pybind11.h>

#include "xla/tsl/framework/allocator.h"

namespace antman_tf {

// The adapter's Python classes the shim builds or recognises; set once by the adapter's
// Python package (module.cc, `_bind_python_types`).
struct PythonTypes {
  pybind11::object allocation_attributes;  // AllocationAttributes(no_retry_on_failure)
  pybind11::object allocator_stats;        // AllocatorStats(...)
  pybind11::object invalid_pointer_error;  // InvalidPointerError
  static PythonTypes& Get();
};

pybind11::object StatsToPython(const tsl::AllocatorStats& stats);
tsl::AllocatorStats StatsFromPython(const pybind11::handle& stats);

class PythonAllocator final : public tsl::Allocator {
 public:
  explicit PythonAllocator(pybind11::object allocator);
  ~PythonAllocator() override;

  std::string Name() override;
  void* AllocateRaw(size_t alignment, size_t num_bytes) override;  // attributes=None
  void* AllocateRaw(size_t alignment, size_t num_bytes,
                    const tsl::AllocationAttributes& attributes) override;
  void DeallocateRaw(void* ptr) override;
  bool TracksAllocationSizes() const override;
  size_t RequestedSize(const void* ptr) const override;
  size_t AllocatedSize(const void* ptr) const override;
  int64_t AllocationId(const void* ptr) const override;
  std::optional<tsl::AllocatorStats> GetStats() override;
  bool ClearStats() override;

 private:
  void* Allocate(size_t alignment, size_t num_bytes, pybind11::object attributes);
  pybind11::object Query(const char* method, const void* ptr) const;

  pybind11::object allocator_;
};

}  // namespace antman_tf

#endif  // ANTMAN_TF_BFC_PYTHON_ALLOCATOR_H_
