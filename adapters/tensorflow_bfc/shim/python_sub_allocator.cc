#include "python_sub_allocator.h"

#include <cstdint>
#include <utility>

#include "bfc_private.h"
#include "errors.h"

namespace py = pybind11;

namespace antman_tf {

size_t BackpedalSize(size_t bytes) {
  static constexpr float kBackpedalFactor = 0.9;  // bfc_allocator.cc, Extend
  return BFCPrivate::RoundedBytes(bytes * kBackpedalFactor);
}

PythonSubAllocator::PythonSubAllocator(py::object sub_allocator, std::string owner)
    : SubAllocator({}, {}), sub_(std::move(sub_allocator)), owner_(std::move(owner)) {}

PythonSubAllocator::~PythonSubAllocator() {
  py::gil_scoped_acquire gil;
  if (free_error_) {
    // The allocator is going away (TensorFlow frees its regions in its destructor): nobody is
    // left to raise to, so the error is logged.
    py::module_::import("logging")
        .attr("getLogger")("adapters.tensorflow_bfc")
        .attr("error")("%s: the sub-allocator's free raised while the allocator was destroyed: %s",
                       owner_, std::string(free_error_->what()));
    free_error_.reset();
  }
  sub_ = py::object();
}

void* PythonSubAllocator::Alloc(size_t alignment, size_t num_bytes, size_t* bytes_received) {
  py::gil_scoped_acquire gil;
  py::object result;
  try {
    result = sub_.attr("alloc")(alignment, num_bytes);
  } catch (py::error_already_set&) {
    // Propagates (as py::error_already_set) through Extend, which has changed nothing but
    // possibly the next region size, as after a refused region; the next Extend starts anew.
    refused_size_ = 0;
    refusals_ = 0;
    throw;
  }
  if (result.is_none()) {
    NoteRefusal(num_bytes);
    return nullptr;
  }
  if (!PyLong_Check(result.ptr()) || PyBool_Check(result.ptr())) {
    throw py::type_error(owner_ + ": sub-allocator alloc() returned " +
                         std::string(py::repr(result)) + ", expected an int address or None");
  }
  const uint64_t address = PyLong_AsUnsignedLongLong(result.ptr());
  if (PyErr_Occurred()) {
    PyErr_Clear();
    throw py::value_error(owner_ + ": sub-allocator alloc() returned " +
                          std::string(py::repr(result)) + ", not an address in [0, 2^64)");
  }
  refused_size_ = 0;
  refusals_ = 0;
  if (address == 0) return nullptr;  // TensorFlow reads a null region as a refusal
  if (address % 256 != 0) {
    throw GuardError(owner_ + ": the sub-allocator returned region " +
                     HexPointer(reinterpret_cast<void*>(address)) +
                     ", not aligned to 256 bytes; TensorFlow 2.21's BFCAllocator::Extend "
                     "CHECK-fails (aborts the process) on it [BFC-8]");
  }
  *bytes_received = num_bytes;
  return reinterpret_cast<void*>(address);
}

void PythonSubAllocator::NoteRefusal(size_t num_bytes) {
  if (BackpedalSize(num_bytes) < num_bytes) {  // TensorFlow's next call asks for less
    refused_size_ = 0;
    refusals_ = 0;
    return;
  }
  refusals_ = refused_size_ == num_bytes ? refusals_ + 1 : 1;
  refused_size_ = num_bytes;
  if (refusals_ < 2) return;
  refused_size_ = 0;
  refusals_ = 0;
  throw GuardError(
      owner_ + ": TensorFlow 2.21's BFCAllocator::Extend would call the sub-allocator "
      "forever: it refused " + std::to_string(num_bytes) + " bytes twice and the backpedal "
      "size RoundedBytes(" + std::to_string(num_bytes) + " * 0.9f) = " +
      std::to_string(BackpedalSize(num_bytes)) + " no longer shrinks, while Extend only stops "
      "below the request (TensorFlow 1.15's endless backpedal, D-BFC-1, is still there; the "
      "adapter ended the loop) [BFC-10]");
}

void PythonSubAllocator::Free(void* ptr, size_t num_bytes) {
  py::gil_scoped_acquire gil;
  try {
    sub_.attr("free")(reinterpret_cast<uintptr_t>(ptr), num_bytes);
  } catch (py::error_already_set& e) {
    if (!free_error_) free_error_ = std::make_unique<py::error_already_set>(std::move(e));
  }
}

void PythonSubAllocator::RaisePendingFreeError() {
  if (!free_error_) return;
  std::unique_ptr<py::error_already_set> error = std::move(free_error_);
  throw *error;
}

void PythonSubAllocator::LogPendingFreeError() {
  if (!free_error_) return;
  std::unique_ptr<py::error_already_set> error = std::move(free_error_);
  py::module_::import("logging")
      .attr("getLogger")("adapters.tensorflow_bfc")
      .attr("error")("%s: the sub-allocator's free raised during a call that failed: %s",
                     owner_, std::string(error->what()));
}

}  // namespace antman_tf
