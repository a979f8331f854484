#include "fault/history.hpp"

#include <fmt/format.h>

#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "outbox/transaction.hpp"
#include "pg/array_literal.hpp"
#include "pg/connection.hpp"
#include "support/kafka_reader.hpp"

namespace outbox::campaign {
namespace {

using namespace std::chrono_literals;

struct Transaction {
  std::vector<std::string> event_ids;
  std::string outcome;  // ok | rolledback | failed | unknown | "" (killed before it knew)
};

std::string uuid_array(const std::vector<std::string>& ids) {
  pg::ArrayLiteral literal;
  for (const auto& id : ids) literal.add_plain(id);
  return literal.text();
}

std::uint64_t scalar(PGconn* conn, const std::string& sql,
                     const std::vector<const char*>& params = {}) {
  return static_cast<std::uint64_t>(pg::exec(conn, sql, params).int64(0, 0));
}

}  // namespace

HistoryReport check_history(const HistoryInput& input, std::chrono::seconds drain) {
  HistoryReport report;
  // Keyed by the order of "pending" lines, not by transaction id: after a server crash an id can
  // be handed out again, so one id may name two transactions in a log.
  std::vector<std::pair<std::uint64_t, Transaction>> transactions;
  for (const std::string& path : input.transaction_logs) {
    std::ifstream log(path);
    std::map<std::uint64_t, std::size_t> latest;  // txid -> its latest "pending" in this log
    std::string line;
    while (std::getline(log, line)) {
      std::istringstream words(line);
      std::string kind;
      std::uint64_t txid = 0;
      words >> kind >> txid;
      if (kind == "pending") {
        latest[txid] = transactions.size();
        transactions.emplace_back(txid, Transaction{});
        std::string id;
        while (words >> id) transactions.back().second.event_ids.push_back(id);
      } else if (!kind.empty() && latest.count(txid) > 0) {
        transactions[latest[txid]].second.outcome = kind;
      }
    }
  }

  auto connection = pg::Connection::open(input.database_url, "campaign-checker");
  PGconn* conn = connection.get();
  std::vector<std::string> committed, aborted;
  for (auto& [txid, tx] : transactions) {
    if (tx.outcome == "ok") {
      ++report.ok;
    } else if (tx.outcome == "rolledback" || tx.outcome == "failed") {
      ++report.failed;
    } else {
      // The producer could not tell. pg_xact_status alone can mislead after a server crash (an
      // uncommitted transaction's id may be reused), so the events decide, all or none.
      ++report.unknown;
      const std::string ids = uuid_array(tx.event_ids);
      for (int i = 0; i < 200 && transaction_status(conn, txid) == TransactionStatus::in_progress;
           ++i) {
        std::this_thread::sleep_for(50ms);
      }
      const auto present =
          scalar(conn, "SELECT count(*) FROM campaign.all_events WHERE event_id = ANY ($1::uuid[])",
                 {ids.c_str()});
      if (present != 0 && present != tx.event_ids.size()) {
        ++report.lost;
        report.examples.push_back(fmt::format("transaction {} left {} of its {} events", txid,
                                              present, tx.event_ids.size()));
      }
      tx.outcome = present == tx.event_ids.size() ? "ok" : "aborted";
    }
    auto& target = tx.outcome == "ok" ? committed : aborted;
    target.insert(target.end(), tx.event_ids.begin(), tx.event_ids.end());
  }
  report.intents = committed.size();

  pg::exec(conn, "CREATE TEMP TABLE committed (id uuid PRIMARY KEY)");
  pg::exec(conn, "CREATE TEMP TABLE aborted (id uuid PRIMARY KEY)");
  const std::string committed_array = uuid_array(committed);
  const std::string aborted_array = uuid_array(aborted);
  pg::exec(conn, "INSERT INTO committed SELECT DISTINCT unnest($1::uuid[])",
           {committed_array.c_str()});
  pg::exec(conn, "INSERT INTO aborted SELECT DISTINCT unnest($1::uuid[])", {aborted_array.c_str()});

  // Drain: every committed event applied, or the time is up.
  // Drain: until every committed event is applied, or nothing moved for `drain` (a consumer that
  // is still catching up after a long run is slow, not losing events).
  const auto drain_started = std::chrono::steady_clock::now();
  const std::string missing_sql =
      "SELECT count(*) FROM committed c WHERE NOT EXISTS "
      "(SELECT 1 FROM campaign.effects e WHERE e.event_id = c.id)";
  std::uint64_t missing = scalar(conn, missing_sql);
  auto last_progress = std::chrono::steady_clock::now();
  for (int round = 1; missing > 0 && std::chrono::steady_clock::now() - last_progress < drain;
       ++round) {
    std::this_thread::sleep_for(200ms);
    const std::uint64_t now_missing = scalar(conn, missing_sql);
    if (now_missing < missing) last_progress = std::chrono::steady_clock::now();
    missing = now_missing;
    if (round % 25 == 0) {
      std::cerr << fmt::format(
          "  draining: {} committed events not applied yet, {} unpublished\n", missing,
          scalar(conn, "SELECT count(*) FROM campaign.outbox_events WHERE published_at IS NULL"));
    }
  }

  report.drain_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - drain_started).count();
  report.lost = scalar(conn, missing_sql);
  const std::uint64_t no_intent =
      scalar(conn,
             "SELECT count(*) FROM committed c WHERE NOT EXISTS "
             "(SELECT 1 FROM campaign.all_events o WHERE o.event_id = c.id)");
  report.phantom = scalar(conn,
                          "SELECT count(DISTINCT event_id) FROM campaign.effects e WHERE "
                          "NOT EXISTS (SELECT 1 FROM committed c WHERE c.id = e.event_id)");
  report.rolled_back_intents = scalar(
      conn, "SELECT count(*) FROM aborted a JOIN campaign.all_events o ON o.event_id = a.id");
  report.duplicate_effects =
      scalar(conn, "SELECT count(*) - count(DISTINCT event_id) FROM campaign.effects");
  report.inversions = scalar(
      conn,
      "SELECT count(*) FROM campaign.effects WHERE aggregate_sequence <> previous_sequence + 1");
  report.stuck = scalar(conn,
                        "SELECT count(*) FROM campaign.outbox_events "
                        "WHERE published_at IS NULL AND skipped_at IS NULL");
  // Cleanup may delete only what was finished before the retention, judged at its own clock.
  const std::string retention = std::to_string(input.cleanup_retention.count());
  report.cleaned = scalar(conn, "SELECT count(*) FROM campaign.cleaned");
  const std::string early_sql =
      "FROM campaign.cleaned WHERE coalesce(published_at, skipped_at) IS NULL"
      " OR coalesce(published_at, skipped_at) > deleted_at - $1::bigint * interval '1 ms'";
  report.cleaned_early = scalar(conn, "SELECT count(*) " + early_sql, {retention.c_str()});
  if (report.cleaned_early > 0) {
    const auto rows = pg::exec(
        conn,
        "SELECT event_id::text, coalesce(published_at::text, 'pending') " + early_sql + " LIMIT 5",
        {retention.c_str()});
    for (int r = 0; r < rows.rows(); ++r) {
      report.examples.push_back(
          fmt::format("cleaned too early: {} (published {})", rows.text(r, 0), rows.text(r, 1)));
    }
  }
  if (no_intent > 0)
    report.examples.push_back(fmt::format("{} committed events have no outbox row", no_intent));
  if (report.lost > 0) {
    const auto rows =
        pg::exec(conn,
                 "SELECT c.id::text FROM committed c WHERE NOT EXISTS "
                 "(SELECT 1 FROM campaign.effects e WHERE e.event_id = c.id) LIMIT 5");
    for (int r = 0; r < rows.rows(); ++r)
      report.examples.push_back("lost " + std::string(rows.text(r, 0)));
  }
  if (report.inversions > 0) {
    const auto rows = pg::exec(conn,
                               "SELECT aggregate_id, aggregate_sequence, previous_sequence "
                               "FROM campaign.effects WHERE aggregate_sequence <> "
                               "previous_sequence + 1 ORDER BY applied_order LIMIT 5");
    for (int r = 0; r < rows.rows(); ++r) {
      report.examples.push_back(fmt::format("applied {} #{} after #{}", rows.text(r, 0),
                                            rows.text(r, 1), rows.text(r, 2)));
    }
  }

  // The topic: duplicates (allowed), phantoms and first-publication order per key. Its ends
  // first: every offset before them must be read.
  const std::map<int, long long> ends = testing::partition_ends(input.brokers, input.topic);
  const auto messages = input.read_topic
                            ? input.read_topic()
                            : testing::read_whole_topic(input.brokers, input.topic, 60s);
  // Offsets run on without gaps in each partition (no transactions write to it): a gap, a
  // partition that starts past 0 or ends before its end is messages the broker dropped before
  // they were read (or not read), and a first publication among them would be missed (a later
  // duplicate taken for it).
  for (const testing::OffsetGap& gap : testing::offset_gaps(messages, ends)) {
    report.unread_messages += static_cast<std::uint64_t>(gap.last - gap.first + 1);
    report.examples.push_back(fmt::format(
        "partition {}: offsets {} to {} were never read (dropped by the broker: librdkafka's "
        "mock keeps 5 MiB a partition); first-publication order is not checked there",
        gap.partition, gap.first, gap.last));
  }
  if (input.read_topic) {  // what reading the topic only now would have missed (information)
    try {
      for (const auto& [partition, end] : ends) {
        report.dropped_by_broker += static_cast<std::uint64_t>(
            testing::watermarks(input.brokers, input.topic, partition).first);
      }
    } catch (const std::exception& e) {
      std::cerr << "  the broker's log starts could not be read: " << e.what() << "\n";
    }
  }
  std::unordered_set<std::string> committed_set(committed.begin(), committed.end());
  std::unordered_set<std::string> seen;
  std::unordered_map<std::string, long long> last_first_seen;
  for (const auto& m : messages) {
    const auto id = m.headers.find("event_id");
    if (id == m.headers.end()) continue;
    if (!seen.insert(id->second).second) {
      ++report.duplicate_publishes;
      continue;
    }
    if (committed_set.count(id->second) == 0) {
      ++report.phantom;
      report.examples.push_back("published, never committed: " + id->second);
    }
    const long long sequence = std::stoll(m.headers.at("aggregate_sequence"));
    long long& last = last_first_seen[m.key];
    if (sequence <= last) {
      ++report.inversions;
      report.examples.push_back(fmt::format("published {} #{} after #{}", m.key, sequence, last));
    }
    last = std::max(last, sequence);
  }

  const std::regex fenced_line(R"((\d+) completion\(s\) fenced)");
  for (const std::string& path : input.relay_logs) {
    std::ifstream log(path);
    std::string line;
    std::smatch match;
    while (std::getline(log, line)) {
      if (std::regex_search(line, match, fenced_line)) report.fenced += std::stoull(match[1]);
    }
  }
  return report;
}

}  // namespace outbox::campaign
