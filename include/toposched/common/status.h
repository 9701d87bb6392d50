#pragma once
// Status and Result<T>: how errors cross component boundaries. Exceptions stop at the edges
// (CLI main, HTTP handlers); everything below returns a Result.

#include <cstdint>
#include <string>
#include <utility>
#include <variant>

namespace toposched {

// What kind of failure an Error is, for callers that act on it (retry, metrics, HTTP status):
// they read the code, never the message, which is for people.
enum class ErrorCode : std::uint8_t {
  kUnknown,      // not classified: reported as it is
  kInvalid,      // the input is malformed or out of range
  kNotFound,     // the object does not exist (API server 404, a pod no longer there)
  kConflict,     // another writer got there first (API server 409, a pod bound elsewhere)
  kGone,         // the resourceVersion is too old (API server 410): relist
  kUnfit,        // the pod does not fit the node (any more)
  kUnavailable,  // the peer could not be reached or answered 5xx/429: try again later
};

class Error {
 public:
  explicit Error(std::string message, ErrorCode code = ErrorCode::kUnknown, int http_status = 0)
      : message_(std::move(message)), code_(code), http_status_(http_status) {}
  const std::string& message() const { return message_; }
  ErrorCode code() const { return code_; }
  // The HTTP status of the peer's answer that caused it (the API server's), 0 when none.
  int http_status() const { return http_status_; }
  // Returns a copy with `context` prepended ("context: message"), for adding a file name or a
  // JSON path as the error travels up; the code and status stay.
  Error WithContext(const std::string& context) const {
    return Error(context + ": " + message_, code_, http_status_);
  }

 private:
  std::string message_;
  ErrorCode code_ = ErrorCode::kUnknown;
  int http_status_ = 0;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::move(value)) {}      // NOLINT(google-explicit-constructor)
  Result(Error error) : state_(std::move(error)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return std::holds_alternative<T>(state_); }
  explicit operator bool() const { return ok(); }
  const T& value() const& { return std::get<T>(state_); }
  T& value() & { return std::get<T>(state_); }
  T&& value() && { return std::get<T>(std::move(state_)); }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }
  const Error& error() const { return std::get<Error>(state_); }

 private:
  std::variant<T, Error> state_;
};

// Result<void>.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error error) : error_(std::move(error)), ok_(false) {}  // NOLINT(google-explicit-constructor)
  static Status Ok() { return Status(); }
  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const { return error_; }

 private:
  Error error_{""};
  bool ok_ = true;
};

// Early returns for the common shapes. The error is returned as it is; the _CTX form prepends
// `context` (Error::WithContext), which is evaluated only on the error path.
//
//   TOPOSCHED_RETURN_IF_ERROR(ReadX(...));                    // a Status expression
//   TOPOSCHED_ASSIGN_OR_RETURN(auto x, ParseY(...));          // declares x (a T) from a Result<T>
//   TOPOSCHED_ASSIGN_OR_RETURN(const auto& x, ParseY(...));   // likewise, bound to the temporary
//   TOPOSCHED_ASSIGN_OR_RETURN(out.field, ParseY(...));       // or assigns an existing lvalue
//   TOPOSCHED_ASSIGN_OR_RETURN_CTX(auto x, ParseY(...), "spec." + name);
//
// TOPOSCHED_RETURN_IF_ERROR is one statement. The ASSIGN forms are not (they must declare their
// left-hand side in the enclosing scope, as abseil's do): brace them after an `if` or `else`; an
// unbraced use does not compile. The Result<T> temporary is named after the line, so put at most
// one per line.
#define TOPOSCHED_RETURN_IF_ERROR(expr)                                  \
  do {                                                                   \
    if (::toposched::Status toposched_s_ = (expr); !toposched_s_.ok()) { \
      return toposched_s_.error();                                       \
    }                                                                    \
  } while (0)

#define TOPOSCHED_ASSIGN_OR_RETURN(lhs, expr) \
  TOPOSCHED_ASSIGN_OR_RETURN_IMPL_(TOPOSCHED_CONCAT_(toposched_result_, __LINE__), lhs, expr, error())

#define TOPOSCHED_ASSIGN_OR_RETURN_CTX(lhs, expr, context)                                    \
  TOPOSCHED_ASSIGN_OR_RETURN_IMPL_(TOPOSCHED_CONCAT_(toposched_result_, __LINE__), lhs, expr, \
                                   error().WithContext(context))

// Implementation details of the macros above.
#define TOPOSCHED_CONCAT_INNER_(a, b) a##b
#define TOPOSCHED_CONCAT_(a, b) TOPOSCHED_CONCAT_INNER_(a, b)
#define TOPOSCHED_ASSIGN_OR_RETURN_IMPL_(result, lhs, expr, error_expr) \
  auto result = (expr);                                                 \
  if (!result.ok()) return result.error_expr;                           \
  lhs = std::move(result).value()

}  // namespace toposched
