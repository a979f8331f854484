#pragma once
// What the broker consumers' tests check of the effects a consumer applied: a table of them in the
// test's schema (one row per effect, in the order applied), an effect that records into it, and
// the counts: all, distinct events, and out of order per aggregate.

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <thread>

#include "outbox/consumed_event.hpp"
#include "support/test_env.hpp"

namespace outbox::testing {

class ConsumerEffects {
 public:
  ConsumerEffects(PGconn* conn, SchemaName schema) : conn_(conn), schema_(std::move(schema)) {
    pg::exec(conn_, "CREATE TABLE " + schema_.table("effects") +
                        " (n bigserial PRIMARY KEY, event_id uuid, aggregate_id text, seq bigint, "
                        "consumer text)");
  }

  // An effect that records the event as applied by `who`.
  std::function<void(PGconn*, const ConsumedEvent&)> record(const std::string& who = "a") const {
    return [table = schema_.table("effects"), who](PGconn* c, const ConsumedEvent& e) {
      const std::string id = e.event_id.to_string();
      const std::string seq = std::to_string(e.aggregate_sequence);
      pg::exec(c,
               "INSERT INTO " + table +
                   " (event_id, aggregate_id, seq, consumer) VALUES ($1, $2, $3, $4)",
               {id.c_str(), e.aggregate_id.c_str(), seq.c_str(), who.c_str()});
    };
  }

  // Calls `poll_once` until `want` effects are recorded or `limit` passes; what poll_once threw
  // last is in last_error().
  long long poll_until(const std::function<void()>& poll_once, long long want,
                       std::chrono::seconds limit) {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (all() < want && std::chrono::steady_clock::now() < until) {
      try {
        poll_once();
      } catch (const std::exception& error) {
        last_error_ = error.what();
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    return all();
  }

  long long all() const { return count(conn_, "SELECT count(*) FROM " + schema_.table("effects")); }
  long long distinct() const {
    return count(conn_, "SELECT count(DISTINCT event_id) FROM " + schema_.table("effects"));
  }
  long long by(const std::string& who) const {
    return count(conn_, "SELECT count(*) FROM " + schema_.table("effects") + " WHERE consumer = $1",
                 {who.c_str()});
  }
  // Effects whose aggregate's sequence does not go up by one in the order they were applied.
  long long out_of_order() const {
    const auto rows = pg::exec(
        conn_, "SELECT aggregate_id, seq FROM " + schema_.table("effects") + " ORDER BY n");
    std::map<std::string, long long> last;
    long long bad = 0;
    for (int i = 0; i < rows.rows(); ++i) {
      const std::string aggregate(rows.text(i, 0));
      const long long seq = std::stoll(std::string(rows.text(i, 1)));
      if (seq != last[aggregate] + 1) ++bad;
      last[aggregate] = seq;
    }
    return bad;
  }
  [[nodiscard]] const std::string& last_error() const { return last_error_; }

 private:
  PGconn* conn_;
  SchemaName schema_;
  std::string last_error_;
};

}  // namespace outbox::testing
