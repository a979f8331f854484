#pragma once
// Whether a table-less message is a producer's. PostgreSQL lets every role call
// pg_logical_emit_message, so a message's prefix and shape prove nothing: any login could make
// the relay publish an event of its choosing. What only a producer can do is write an aggregate's
// sequence counter (outbox_aggregate_sequences: the writer role's, and the table owner's): the
// producer's statement moves the counter to the last sequence it emits, in the same transaction,
// before the message (the message is built from the counter's RETURNING). A table-less relay
// streams the counters' changes too (a second publication, `<publication>_seq`), notes
// them per transaction here, and takes a message only when a change of its aggregate's counter to
// the message's last sequence was read before it in the same transaction; each change vouches for
// one message. No I/O (tests/unit/sequence_witness_test.cpp).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "cdc/pgoutput.hpp"

namespace outbox::cdc {

class SequenceWitness {
 public:
  // The counters' table as the publication sends it (a Relation message): where the three columns
  // are. Returns the problem when it lacks one (an outbox schema older than the relay).
  std::optional<std::string> map(const Relation& relation);
  [[nodiscard]] bool knows(std::uint32_t relation_id) const noexcept {
    return mapped_ && relation_id == relation_id_;
  }

  // A transaction begins (Begin) or ends (Commit): what was noted is forgotten.
  void begin() { writes_.clear(); }

  // A change of one counter (the new row of an Insert or Update of the mapped relation). A row
  // whose values are not text (null, unchanged TOAST, binary) or not a number vouches for nothing.
  void note(std::uint32_t relation_id, const std::vector<TupleColumn>& row);

  // Nothing noted in this transaction (or all used): no message of it can be a producer's.
  [[nodiscard]] bool empty() const noexcept { return writes_.empty(); }

  // Whether a change of (aggregate_type, aggregate_id)'s counter to `last_sequence` was noted in
  // this transaction and not yet used; uses it when so.
  bool vouch(const std::string& aggregate_type, const std::string& aggregate_id,
             std::int64_t last_sequence);

 private:
  bool mapped_ = false;
  std::uint32_t relation_id_ = 0;
  std::size_t type_column_ = 0, id_column_ = 0, sequence_column_ = 0;
  // A digest of (type, id, sequence) -> changes not yet used. A digest, not the names: a
  // transaction may move millions of counters (a backfill), each an entry until its commit
  // (about 40 bytes each, whatever the names' length). Two changes with one digest only make one
  // vouch for the other's message, and both are the producer's; a forger's transaction has none.
  static std::uint64_t digest(std::string_view type, std::string_view id, std::int64_t sequence);
  std::unordered_map<std::uint64_t, std::uint32_t> writes_;
};

}  // namespace outbox::cdc
