// A tsl::SubAllocator that calls back into the Python sub-allocator the suite passes
// (`alloc(alignment, num_bytes) -> int | None`, `free(ptr, num_bytes)`), so that OOM injection
// and call recording work on TensorFlow's compiled BFC unchanged.
//
// It also ends TensorFlow 2.21's endless backpedal: BFCAllocator::Extend retries a refused
// region with RoundedBytes(size * 0.9f) and stops only when that falls below the request, so
// once the size stops shrinking (2304 bytes and below) a sub-allocator that keeps refusing is
// called forever. When the same size that cannot shrink is refused twice in a row, Alloc
// throws antman_tf::GuardError, which unwinds out of Extend (TensorFlow releases its mutex on
// the way) and reaches the caller as TensorFlowGuardError naming BFC-10.
#ifndef ANTMAN_TF_BFC_PYTHON_SUB_ALLOCATOR_H_
#define ANTMAN_TF_BFC_PYTHON_SUB_ALLOCATOR_H_

#include <cstddef>
#include <memory>
#include <string>

#include <pybind11/pybind11.h>

#include "xla/tsl/framework/allocator.h"

namespace antman_tf {

class PythonSubAllocator final : public tsl::SubAllocator {
 public:
  // `owner` names the allocator in guard messages.
  PythonSubAllocator(pybind11::object sub_allocator, std::string owner);
  ~PythonSubAllocator() override;

  void* Alloc(size_t alignment, size_t num_bytes, size_t* bytes_received) override;
  void Free(void* ptr, size_t num_bytes) override;
  // Regions are never merged: TensorFlow's GPU sub-allocator (DeviceMemAllocator) says the
  // same, and SPEC.md BFC-5 forbids it.
  bool SupportsCoalescing() const override { return false; }

  const pybind11::object& python_object() const { return sub_; }

  // Free must not throw through TensorFlow (it runs in the middle of DeallocateRegions):
  // the first exception a Python `free` raised is kept here until the call that made
  // TensorFlow free the region returns. Call with the GIL held.
  void RaisePendingFreeError();
  // The same, when the call raised something else: the free's error is logged. GIL held.
  void LogPendingFreeError();

 private:
  void NoteRefusal(size_t num_bytes);

  pybind11::object sub_;
  std::string owner_;
  // The hang guard's state; Alloc is only called by Extend, under the BFC's mutex.
  size_t refused_size_ = 0;
  int refusals_ = 0;
  std::unique_ptr<pybind11::error_already_set> free_error_;
};

// RoundedBytes(bytes * kBackpedalFactor) as BFCAllocator::Extend computes it (float).
size_t BackpedalSize(size_t bytes);

}  // namespace antman_tf

#endif  // ANTMAN_TF_BFC_PYTHON_SUB_ALLOCATOR_H_
