/// \file
/// The exception hierarchy. Every error strata raises derives from strata::error and its
/// message starts with a stable id in brackets, e.g. "[strata.data] ...".
///
/// Recoverable conditions (io_error, data_error, timeout) are separate from misuse
/// (invalid_argument): a caller may retry the first kind, never the second.
#pragma once

#include <cstddef>
#include <cstring>  // std::strlen, std::strncmp
#include <initializer_list>
#include <ios>  // std::ios_base
#include <ostream>
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

/// Host memory could not be had: the message names the bytes asked for, those the process's
/// tensors hold, and the process's address-space limit where one is set.
class out_of_memory : public error {
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

/// One part of a message, of any type with operator<<: where it lies and the function that
/// writes it. Messages are joined from these, so the code that formats a part exists once per
/// type of part, not once per list of types (every check in the library has its own list,
/// and each list instantiated as a whole was about a tenth of a translation unit's code).
class MessagePart {
 public:
  using Manipulator = std::ios_base& (*)(std::ios_base&);  // std::hex, std::fixed, ...

  template <class T>
  MessagePart(const T& value) noexcept : value_(&value), write_(&write_as<T>) {}  // implicit: parts convert
  MessagePart(const char* text) noexcept : value_(text), write_(&write_text) {}   // literals of any length
  MessagePart(Manipulator manipulator) noexcept : manipulator_(manipulator), write_(&write_manipulator) {}
  void write(std::ostream& os) const { write_(os, *this); }

 private:
  template <class T>
  static void write_as(std::ostream& os, const MessagePart& part) {
    os << *static_cast<const T*>(part.value_);
  }
  static void write_text(std::ostream& os, const MessagePart& part) { os << static_cast<const char*>(part.value_); }
  static void write_manipulator(std::ostream& os, const MessagePart& part) { os << part.manipulator_; }

  const void* value_ = nullptr;
  Manipulator manipulator_ = nullptr;
  void (*write_)(std::ostream&, const MessagePart&);
};

/// The parts written one after another.
inline std::string join_parts(std::initializer_list<MessagePart> parts) {
  std::ostringstream os;
  for (const MessagePart& part : parts) part.write(os);
  return os.str();
}

/// Concatenates every argument with operator<<.
template <class... Parts>
std::string make_message(const Parts&... parts) {
  return join_parts({MessagePart(parts)...});
}

/// "[id] " and the parts: the text of an error that is reported rather than thrown here (a
/// line on stderr, a reason handed to the other ranks).
template <class... Parts>
std::string error_text(const char* id, const Parts&... parts) {
  return join_parts({MessagePart("["), MessagePart(id), MessagePart("] "), MessagePart(parts)...});
}

/// The place an error names: a library header by its include path ("strata/ops/conv.hpp"),
/// however the build spelled it (relative to a build directory, absolute, installed); any
/// other file by its name alone.
inline const char* source_place(const char* file) noexcept {
  const char* name = file;
  const char* library = nullptr;
  for (const char* p = file; *p != '\0'; ++p) {
    if (*p == '/') name = p + 1;
    if (*p != '/' || std::strncmp(p + 1, "strata/", 7) != 0) continue;
    // "strata/" under one of the include roots (include/, strategies/, kernels/)
    for (const char* root : {"include", "strategies", "kernels"}) {
      const std::size_t n = std::strlen(root);
      if (static_cast<std::size_t>(p - file) >= n && std::strncmp(p - n, root, n) == 0 &&
          (p - n == file || p[-static_cast<std::ptrdiff_t>(n) - 1] == '/'))
        library = p + 1;
    }
  }
  return library != nullptr ? library : name;
}

/// Throws Error("[id] " + the parts + " (file:line)"); out of line and cold, so that a check
/// adds only a call to the code around it.
template <class Error>
[[noreturn, gnu::cold, gnu::noinline]] void throw_parts(const char* id, const char* file, int line,
                                                         std::initializer_list<MessagePart> parts) {
  std::ostringstream os;
  os << '[' << id << "] ";
  for (const MessagePart& part : parts) part.write(os);
  os << " (" << source_place(file) << ':' << line << ')';
  throw Error(os.str());
}

template <class Error, class... Parts>
[[noreturn]] void throw_error(const char* id, const char* file, int line, const Parts&... parts) {
  throw_parts<Error>(id, file, line, {MessagePart(parts)...});
}

}  // namespace strata::detail

/// Throws `type` (a strata::error) with a message that starts with the stable id `id`, then
/// the parts (anything with operator<<), then where it was raised. Every error strata raises
/// goes through it.
#define STRATA_THROW(type, id, ...) ::strata::detail::throw_error<type>(id, __FILE__, __LINE__, __VA_ARGS__)
