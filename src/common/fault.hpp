#pragma once
// Named fault points at the durable boundaries of the product (see docs/GUARANTEES.md). Disarmed,
// a point is one load of a bool and a predictable branch. Only tests arm them: in-process with
// fault::arm(), or in a program that asks for it with fault::arm_from_environment() (the outbox
// CLI and the crash campaign's workers do; a service that links liboutbox never reads the
// variable), from
//
//   OUTBOX_FAULTS="relay.after_ack_before_mark=kill@3,relay.after_claim=delay:200@1"
//
// Built with -DOUTBOX_FAULT_INJECTION=OFF the points compile to nothing and arming is refused.
// Each entry is point=action[@N], for a point of kPoints: fire on the Nth hit of that point
// (default 1), once. Actions:
//   kill     SIGKILL this process (a crash at exactly this point)
//   stop     SIGSTOP this process (a pause; whoever armed it sends SIGCONT)
//   error    throw outbox::Error("injected fault at <point>", retryable)
//   dberror  throw outbox::DatabaseError (SQLSTATE 08006, retryable), as a lost connection would
//   delay:MS sleep MS milliseconds
//   exit     _exit(86) without cleanup

#include <atomic>
#include <string>
#include <string_view>

namespace outbox::fault {

// The points, in the order a row passes them.
inline constexpr const char* kProducerBeforeCommit = "producer.before_commit";
inline constexpr const char* kProducerAfterCommit = "producer.after_commit";
inline constexpr const char* kRelayAfterClaim = "relay.after_claim";
inline constexpr const char* kRelayBeforePublish = "relay.before_publish";
inline constexpr const char* kRelayAfterAckBeforeMark = "relay.after_ack_before_mark";
inline constexpr const char* kRelayAfterMark = "relay.after_mark";
inline constexpr const char* kConsumerAfterCommitBeforeOffset =
    "consumer.after_commit_before_offset";
inline constexpr const char* kCleanupMidBatch = "cleanup.mid_batch";

// Every point above; arm() refuses any other name (a misspelt point would inject nothing).
inline constexpr const char* kPoints[] = {kProducerBeforeCommit,
                                          kProducerAfterCommit,
                                          kRelayAfterClaim,
                                          kRelayBeforePublish,
                                          kRelayAfterAckBeforeMark,
                                          kRelayAfterMark,
                                          kConsumerAfterCommitBeforeOffset,
                                          kCleanupMidBatch};

// False when built with -DOUTBOX_FAULT_INJECTION=OFF.
bool compiled_in() noexcept;

extern std::atomic<bool> g_armed;

inline bool armed() noexcept { return g_armed.load(std::memory_order_relaxed); }

// Counts a hit of `point` and fires its action when due.
void hit(std::string_view point);

// Replaces the armed set (empty disarms). Throws InvalidArgument naming the bad entry (malformed,
// or a point not in kPoints), or ConfigError when fault injection is not compiled in; nothing is
// armed then.
void arm(const std::string& spec);

// Arms from $OUTBOX_FAULTS when it is set and not empty; returns the spec armed ("" when none).
// Throws like arm(). Call it from main(), never from a library: it turns a process's environment
// into SIGKILLs.
std::string arm_from_environment();

// How often `point` was hit since it was armed.
long hits(std::string_view point);

}  // namespace outbox::fault

#if OUTBOX_FAULT_INJECTION
#define OUTBOX_FAULT(point)                                    \
  do {                                                         \
    if (::outbox::fault::armed()) ::outbox::fault::hit(point); \
  } while (0)
#else
#define OUTBOX_FAULT(point) \
  do {                      \
  } while (0)
#endif
