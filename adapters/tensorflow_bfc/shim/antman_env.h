// How the AntMan layer reads its environment variables: through TensorFlow 2.21's own
// tsl::ReadBoolFromEnvVar / ReadInt64FromEnvVar, which return a Status instead of logging.
// A failed read is logged at ERROR (LOG, forwarded to Python logging by the shim) and the
// default is used: ReadInt64FromEnvVar leaves absl::SimpleAtoi's partial result in its
// output on failure ("12abc" -> 12, "0x10" -> 0, overflow -> the clamped value), so a port
// that ignores the Status would run with that value instead.
#ifndef ANTMAN_TF_BFC_ANTMAN_ENV_H_
#define ANTMAN_TF_BFC_ANTMAN_ENV_H_

#include <cstdint>

namespace antman_tf {

bool ReadBoolFromEnvVarOrDefault(const char* name, bool default_value);
int64_t ReadInt64FromEnvVarOrDefault(const char* name, int64_t default_value);

}  // namespace antman_tf

#endif  // ANTMAN_TF_BFC_ANTMAN_ENV_H_
