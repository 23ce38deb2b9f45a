/// \file
/// The exception hierarchy. Every error strata raises derives from strata::error and its
/// message starts with a stable id in brackets, e.g. "[strata.data] ...".
///
/// Recoverable conditions (io_error, data_error, timeout) are separate from misuse
/// (invalid_argument): a caller may retry the first kind, never the second.
#pragma once

#include <sstream>    // std::ostringstream
#include <stdexcept>  // std::runtime_error
#include <string>

namespace strata {

/// Base of every strata exception.
class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A caller broke a precondition: bad shape, bad dtype, bad argument value.
class invalid_argument : public error {
 public:
  using error::error;
};

/// A file could not be opened, read or written.
class io_error : public error {
 public:
  using error::error;
};

/// A data file exists but its content is malformed (bad magic, truncated, mismatched counts).
class data_error : public error {
 public:
  using error::error;
};

/// A checkpoint's bytes do not match their stored checksum (a flipped bit, a torn write).
class checksum_error : public data_error {
 public:
  using data_error::data_error;
};

/// A checkpoint file holds fewer (or more) bytes than its header declares.
class truncated_error : public data_error {
 public:
  using data_error::data_error;
};

/// A checkpoint written in a newer format than this build reads.
class version_error : public data_error {
 public:
  using data_error::data_error;
};

/// A wait exceeded its deadline.
class timeout_error : public error {
 public:
  using error::error;
};

/// A collective operation failed: a peer died, the group was aborted, or ranks disagreed on
/// what they were calling. The message names the collective, its sequence number and ranks.
class collective_error : public error {
 public:
  using error::error;
};

/// A CUDA, cuBLAS or cuDNN call failed (no device, out of device memory, a kernel fault).
/// The message names the call and the library's own error string.
class cuda_error : public error {
 public:
  using error::error;
};

/// An internal invariant failed: a bug in strata.
class internal_error : public error {
 public:
  using error::error;
};

}  // namespace strata

namespace strata::detail {

/// Concatenates every argument with operator<<.
template <class... Parts>
std::string make_message(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}

/// "[id] " and the parts: the text of an error that is reported rather than thrown here (a
/// line on stderr, a reason handed to the other ranks).
template <class... Parts>
std::string error_text(const char* id, const Parts&... parts) {
  if constexpr (sizeof...(Parts) == 0)
    return make_message("[", id, "] ");
  else
    return make_message("[", id, "] ", parts...);
}

template <class Error, class... Parts>
[[noreturn]] void throw_error(const char* id, const char* file, int line, const Parts&... parts) {
  throw Error(make_message("[", id, "] ", parts..., " (", file, ":", line, ")"));
}

}  // namespace strata::detail

/// Throws `type` (a strata::error) with a message that starts with the stable id `id`, then
/// the parts (anything with operator<<), then where it was raised. Every error strata raises
/// goes through it.
#define STRATA_THROW(type, id, ...) ::strata::detail::throw_error<type>(id, __FILE__, __LINE__, __VA_ARGS__)
