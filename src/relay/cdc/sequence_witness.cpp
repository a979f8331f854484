#include "relay/cdc/sequence_witness.hpp"

#include <charconv>

namespace outbox::cdc {

std::optional<std::string> SequenceWitness::map(const Relation& relation) {
  mapped_ = false;
  const auto found = find_columns(relation, {"aggregate_type", "aggregate_id", "last_sequence"});
  if (const auto* missing = std::get_if<MissingColumn>(&found)) return missing->message;
  const auto& positions = std::get<std::vector<std::size_t>>(found);
  relation_id_ = relation.relation_id;
  type_column_ = positions[0];
  id_column_ = positions[1];
  sequence_column_ = positions[2];
  mapped_ = true;
  return std::nullopt;
}

void SequenceWitness::note(std::uint32_t relation_id, const std::vector<TupleColumn>& row) {
  if (!knows(relation_id)) return;
  const auto text = [&](std::size_t at) -> const TupleColumn* {
    if (at >= row.size() || row[at].kind != ColumnKind::text) return nullptr;
    return &row[at];
  };
  const TupleColumn* type = text(type_column_);
  const TupleColumn* id = text(id_column_);
  const TupleColumn* sequence = text(sequence_column_);
  if (type == nullptr || id == nullptr || sequence == nullptr) return;
  std::int64_t last = 0;
  const std::string_view digits = sequence->value;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), last);
  if (error != std::errc() || end != digits.data() + digits.size() || last < 1) return;
  ++writes_[digest(type->value, id->value, last)];
}

// FNV-1a over the type, a NUL (names hold none), the id, a NUL and the sequence's 8 bytes.
std::uint64_t SequenceWitness::digest(std::string_view type, std::string_view id,
                                      std::int64_t sequence) {
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  const auto mix = [&hash](unsigned char byte) {
    hash ^= byte;
    hash *= 0x100000001b3ULL;
  };
  for (const char c : type) mix(static_cast<unsigned char>(c));
  mix(0);
  for (const char c : id) mix(static_cast<unsigned char>(c));
  mix(0);
  for (int shift = 0; shift < 64; shift += 8) {
    mix(static_cast<unsigned char>(static_cast<std::uint64_t>(sequence) >> shift));
  }
  return hash;
}

bool SequenceWitness::vouch(const std::string& aggregate_type, const std::string& aggregate_id,
                            std::int64_t last_sequence) {
  const auto found = writes_.find(digest(aggregate_type, aggregate_id, last_sequence));
  if (found == writes_.end()) return false;
  if (--found->second == 0) writes_.erase(found);
  return true;
}

}  // namespace outbox::cdc
