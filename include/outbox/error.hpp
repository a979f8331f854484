#pragma once
// Every exception outbox throws derives from outbox::Error. Each says what failed, whether trying
// again can help (retryable()), and carries the backend's own code where there is one.

#include <stdexcept>
#include <string>

namespace outbox {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message, bool retryable = false)
      : std::runtime_error(message), retryable_(retryable) {}
  // True when the same call may succeed later without any change by the caller
  // (connection lost, serialization failure, broker temporarily unavailable).
  [[nodiscard]] bool retryable() const noexcept { return retryable_; }

 private:
  bool retryable_;
};

// The caller passed something that can never succeed (empty aggregate id, payload that is not
// JSON, bad schema name, a connection outside a transaction). Thrown before anything is written.
class InvalidArgument : public Error {
 public:
  explicit InvalidArgument(const std::string& message) : Error(message, false) {}
};

// Bad configuration (unknown option, unreachable setting). Nothing was started.
class ConfigError : public Error {
 public:
  explicit ConfigError(const std::string& message) : Error(message, false) {}
};

// PostgreSQL reported an error. sqlstate() is the five-character SQLSTATE ("" when the
// connection itself failed before the server answered).
class DatabaseError : public Error {
 public:
  DatabaseError(const std::string& message, std::string sqlstate, bool retryable)
      : Error(message, retryable), sqlstate_(std::move(sqlstate)) {}
  [[nodiscard]] const std::string& sqlstate() const noexcept { return sqlstate_; }

 private:
  std::string sqlstate_;
};

// The connection broke while a COMMIT was in flight: the transaction may or may not have
// committed. retryable() says whether doing the work again is safe either way: true where outbox
// made the work idempotent (an inbox batch: a redelivery is found duplicate; a cleanup batch),
// false for the caller's own transaction (outbox::commit): resolve it by transaction id first
// (outbox/transaction.hpp), since a blind retry could apply the business change twice.
class OutcomeUnknown : public DatabaseError {
 public:
  explicit OutcomeUnknown(const std::string& message, bool retryable = false)
      : DatabaseError(message, "08006", retryable) {}
};

// A message broker refused or failed an operation outside the asynchronous delivery path
// (delivery results are values: see outbox/sink.hpp).
class BrokerError : public Error {
 public:
  BrokerError(const std::string& message, int code, bool retryable)
      : Error(message, retryable), code_(code) {}
  [[nodiscard]] int code() const noexcept { return code_; }

 private:
  int code_;
};

}  // namespace outbox
