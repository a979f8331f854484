#pragma once
// The polling relay's source and recorder (event_source.hpp): claims pending heads with a token
// and a lease (relay_sql::claim), marks them published or failed by that token (fencing), claims
// successors in the mark, renews the leases of what is in flight, registers the relay session in
// outbox_relays (awake or listening, the heartbeat), and takes over the claims of relay sessions
// that died (sweeps). One PostgreSQL session, replaced by reconnect().

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/health_board.hpp"
#include "outbox/relay.hpp"
#include "pg/connection.hpp"
#include "relay/claim_horizon.hpp"
#include "relay/dead_sessions.hpp"
#include "relay/event_source.hpp"
#include "relay/relay_counters.hpp"

namespace outbox::detail {

class PollingSource final : public RelaySourceBase {
 public:
  using Clock = std::chrono::steady_clock;
  using milliseconds = std::chrono::milliseconds;

  // Connects (throws DatabaseError), and refuses a schema without the migrations it needs
  // (ConfigError). `options` and `counters` must outlive it. `claim_scope`: a condition on the
  // row `e` that claims keep to (relay_sql::claim; a shard of the aggregates), "" for every row.
  // `health` (may be null): the relay's, written into the session's row with each heartbeat
  // (the admin page's broker state); must outlive this.
  PollingSource(const RelayOptions& options, RelayCounters& counters,
                const std::string& claim_scope = "", const HealthBoard* health = nullptr);

  Fetched fetch(std::size_t limit, std::uint64_t byte_room, bool holding_nothing) override;
  bool wait_for_news(milliseconds timeout) override;
  bool run_duties(Clock::time_point now, const SendWindow& window) override;
  [[nodiscard]] Clock::time_point next_duty() const override;
  void set_listening(bool listening) override;
  [[nodiscard]] bool listening() const override { return listening_; }
  bool reconnect(SendWindow& window) override;
  void leave() noexcept override;

  std::vector<SourcedEvent> record_published(std::vector<Outcome>& published, bool take_successors,
                                             std::uint64_t successor_bytes) override;
  void record_failed(std::vector<Outcome>& failed) override;

  // For events no claim holds (Origin::unclaimed, from a source built on this one): as
  // record_published (without successors) and record_failed on rows no one claimed, but an
  // outcome whose row was not there to write is handed back in `unwritten` instead of being
  // counted as fenced (the source may have read the event before other sessions see its row).
  void record_unclaimed_published(std::vector<Outcome>& published, std::vector<Outcome>& unwritten);
  // Counts and logs the rows a mark_failed quarantined or parked in doubt.
  void note_set_aside(const std::vector<Outcome>& failed,
                      const std::vector<std::string>& quarantined,
                      const std::vector<std::string>& in_doubt);
  void record_unclaimed_failed(std::vector<Outcome>& failed, std::vector<Outcome>& unwritten);

  // Extends the leases of everything in flight.
  void renew_leases(const SendWindow& window);

  // Which untouched rows claims take (claim_horizon.hpp); every one by default. A source built
  // on this one narrows it to what it does not bring itself.
  void set_claim_horizon(ClaimHorizon horizon) { claim_horizon_ = horizon; }

  // What a source built on this one streams from, shown by `outbox status` from the session's
  // row: a replication slot, the mode it is in for it ("streaming", "standby", "released"), and
  // the walsender's pid while streaming (0 otherwise). Empty: nothing (a polling relay).
  struct StreamNote {
    std::string slot;
    std::string mode;
    int walsender = 0;
    bool operator==(const StreamNote&) const = default;
  };
  // Written to the row at once when it changed, and again with every heartbeat.
  void set_stream(StreamNote note);

  // The session, for a source built on this one (its own statements).
  [[nodiscard]] PGconn* connection() const { return session_.connection.get(); }

 private:
  // A relay refreshes its outbox_relays row this often, awake or listening; producers ignore rows
  // older than 30 s (migrations 3 and 6), so a relay that died awake stops suppressing NOTIFY
  // soon, and one that died listening stops asking for it. (A live relay's sweep takes a dead
  // session's row out of their count sooner.)
  static constexpr std::chrono::seconds kHeartbeat{10};
  // Every relay looks this often for relay sessions that ended (relay_sql::sweep): one statement
  // on the small outbox_relays table and pg_locks, never on the claim's path. A session seen
  // ended counts as dead after kSessionGrace, or kRestartGrace if it began before the server's
  // last start (every relay then reconnects at once, the last after up to
  // reconnect_backoff_max, 5 s by default). Then its claims are taken over at once instead of
  // after their lease: after a SIGKILL another relay publishes them within kSweepEvery +
  // kSessionGrace + a claim.
  static constexpr milliseconds kSweepEvery{500};
  static constexpr milliseconds kSessionGrace{1000};
  static constexpr milliseconds kRestartGrace{10000};

  // polling_session.cpp: the session's connection, row, reconnect, leaving and sweep.
  struct Session {
    pg::Connection connection;
    std::int64_t lock_key = 0;
  };
  static Session open_session(const RelayOptions& options);
  void begin_session();
  void adopt_claims(SendWindow& window);
  // The session's outbox_relays row: inserted by the first call, then state and heartbeat.
  void register_session(bool listening);
  std::string next_token();
  // Runs one batched completion ($1 ids, $2 tokens, then `extra`) and hands each statement's
  // result to `read_rows`, which decodes it once, keeps what its caller needs and returns the ids
  // of the rows it completed. Rows not completed get one more try; those still not are fenced
  // (counted, logged), or handed back in `unwritten` when given. Those completed count as `done`
  // for their aggregate type. Returns how many statements it sent.
  using ExtraParams = std::function<std::vector<std::string>(const std::vector<const Outcome*>&)>;
  using ReadRows = std::function<std::vector<std::string>(const pg::Result&)>;
  std::size_t complete(const std::string& sql, const std::vector<Outcome>& outcomes,
                       const ExtraParams& extra, const ReadRows& read_rows,
                       std::vector<Outcome>* unwritten, std::optional<TypedCounts::Kind> done);
  std::vector<SourcedEvent> write_published(std::vector<Outcome>& published, bool take_successors,
                                            std::uint64_t successor_bytes,
                                            std::vector<Outcome>* unwritten);
  void write_failed(std::vector<Outcome>& failed, std::vector<Outcome>* unwritten);
  bool sweep();
  [[nodiscard]] const std::string& relay_id() const { return options_.relay_id; }

  const RelayOptions& options_;
  RelayCounters& counters_;
  const HealthBoard* health_;  // the relay's, or null
  Session session_;
  std::string session_id_;           // "<relay id>:<session>": its outbox_relays row, token prefix
  std::string previous_session_id_;  // a row to retire at the next registration (a reconnect)
  // The counter's value the current session's row counts from: where the last row's count
  // stopped, so what a session published after its last heartbeat goes into the next one's.
  std::uint64_t published_before_session_ = 0;
  std::uint64_t published_reported_ = 0;  // the counter's value in the last row written
  std::uint64_t claim_epoch_ = 0;
  const std::string claim_sql_;
  const std::string mark_published_sql_;
  const std::string mark_failed_sql_;
  const std::string renew_sql_;
  const std::string adopt_sql_;
  const std::string set_listening_sql_;
  const std::string forget_relay_sql_;
  const std::string retire_relay_sql_;
  const std::string sweep_sql_;
  DeadSessions dead_sessions_;  // their claims are claimable at once
  bool listening_ = false;      // what outbox_relays says about us: waiting for a NOTIFY
  Clock::time_point last_heartbeat_;
  Clock::time_point last_renewal_;
  std::string cursor_type_;  // where the next claim's scan of pending aggregates starts
  std::string cursor_id_;
  ClaimHorizon claim_horizon_ = ClaimHorizon::everything();
  StreamNote stream_;
};

}  // namespace outbox::detail
