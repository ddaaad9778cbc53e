#include "python_allocator.h"

#include <utility>

#include "errors.h"

namespace py = pybind11;

namespace antman_tf {

PythonTypes& PythonTypes::Get() {
  static PythonTypes* types = new PythonTypes();  // never destroyed: outlives the interpreter
  return *types;
}

py::object StatsToPython(const tsl::AllocatorStats& s) {
  auto optional = [](const std::optional<int64_t>& v) -> py::object {
    return v ? py::object(py::int_(*v)) : py::object(py::none());
  };
  return PythonTypes::Get().allocator_stats(
      py::arg("num_allocs") = s.num_allocs, py::arg("bytes_in_use") = s.bytes_in_use,
      py::arg("peak_bytes_in_use") = s.peak_bytes_in_use,
      py::arg("largest_alloc_size") = s.largest_alloc_size,
      py::arg("bytes_limit") = optional(s.bytes_limit),
      py::arg("bytes_reserved") = s.bytes_reserved,
      py::arg("peak_bytes_reserved") = s.peak_bytes_reserved,
      py::arg("bytes_reservable_limit") = optional(s.bytes_reservable_limit));
}

tsl::AllocatorStats StatsFromPython(const py::handle& stats) {
  auto optional = [&](const char* field) -> std::optional<int64_t> {
    py::object v = stats.attr(field);
    if (v.is_none()) return std::nullopt;
    return v.cast<int64_t>();
  };
  tsl::AllocatorStats s;
  s.num_allocs = stats.attr("num_allocs").cast<int64_t>();
  s.bytes_in_use = stats.attr("bytes_in_use").cast<int64_t>();
  s.peak_bytes_in_use = stats.attr("peak_bytes_in_use").cast<int64_t>();
  s.largest_alloc_size = stats.attr("largest_alloc_size").cast<int64_t>();
  s.bytes_limit = optional("bytes_limit");
  s.bytes_reserved = stats.attr("bytes_reserved").cast<int64_t>();
  s.peak_bytes_reserved = stats.attr("peak_bytes_reserved").cast<int64_t>();
  s.bytes_reservable_limit = optional("bytes_reservable_limit");
  return s;
}

PythonAllocator::PythonAllocator(py::object allocator) : allocator_(std::move(allocator)) {}

PythonAllocator::~PythonAllocator() {
  py::gil_scoped_acquire gil;
  allocator_ = py::object();
}

std::string PythonAllocator::Name() {
  py::gil_scoped_acquire gil;
  return py::str(allocator_.attr("name"));
}

void* PythonAllocator::Allocate(size_t alignment, size_t num_bytes, py::object attributes) {
  py::object ptr = allocator_.attr("allocate_raw")(alignment, num_bytes, attributes);
  if (ptr.is_none()) return nullptr;
  return reinterpret_cast<void*>(ptr.cast<uintptr_t>());
}

void* PythonAllocator::AllocateRaw(size_t alignment, size_t num_bytes) {
  py::gil_scoped_acquire gil;
  return Allocate(alignment, num_bytes, py::none());
}

void* PythonAllocator::AllocateRaw(size_t alignment, size_t num_bytes,
                                   const tsl::AllocationAttributes& attributes) {
  py::gil_scoped_acquire gil;
  return Allocate(alignment, num_bytes,
                  PythonTypes::Get().allocation_attributes(
                      py::arg("no_retry_on_failure") = !attributes.retry_on_failure));
}

py::object PythonAllocator::Query(const char* method, const void* ptr) const {
  try {
    return allocator_.attr(method)(reinterpret_cast<uintptr_t>(ptr));
  } catch (py::error_already_set& e) {
    if (e.matches(PythonTypes::Get().invalid_pointer_error)) {
      throw InvalidPointer(py::str(e.value()));
    }
    throw;
  }
}

void PythonAllocator::DeallocateRaw(void* ptr) {
  py::gil_scoped_acquire gil;
  Query("deallocate_raw", ptr);
}

bool PythonAllocator::TracksAllocationSizes() const {
  py::gil_scoped_acquire gil;
  return allocator_.attr("tracks_allocation_sizes")().cast<bool>();
}

size_t PythonAllocator::RequestedSize(const void* ptr) const {
  py::gil_scoped_acquire gil;
  return Query("requested_size", ptr).cast<size_t>();
}

size_t PythonAllocator::AllocatedSize(const void* ptr) const {
  py::gil_scoped_acquire gil;
  return Query("allocated_size", ptr).cast<size_t>();
}

int64_t PythonAllocator::AllocationId(const void* ptr) const {
  py::gil_scoped_acquire gil;
  return Query("allocation_id", ptr).cast<int64_t>();
}

std::optional<tsl::AllocatorStats> PythonAllocator::GetStats() {
  py::gil_scoped_acquire gil;
  py::object stats = allocator_.attr("get_stats")();
  if (stats.is_none()) return std::nullopt;
  return StatsFromPython(stats);
}

bool PythonAllocator::ClearStats() {
  py::gil_scoped_acquire gil;
  allocator_.attr("clear_stats")();
  return true;
}

}  // namespace antman_tf
