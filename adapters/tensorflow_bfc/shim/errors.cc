#include "errors.h"

#include <cstdint>
#include <cstdio>

namespace antman_tf {

std::string HexPointer(const void* ptr) {
  char text[32];
  std::snprintf(text, sizeof(text), "%#llx",
                static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(ptr)));
  return text;
}

}  // namespace antman_tf
