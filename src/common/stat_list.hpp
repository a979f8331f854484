#pragma once
// What the library makes of a statistics list (outbox/stats.hpp): the atomic counters a thread
// writes and any thread reads, their snapshot, and the samples Prometheus, JSON and the text line
// are written from.

#include <atomic>
#include <iterator>
#include <vector>

#include "outbox/stats.hpp"

namespace outbox::detail {

template <StatKind K>
using AtomicStat = std::atomic<typename StatType<K>::type>;

template <typename T>
std::int64_t stat_value(T value) {
  return static_cast<std::int64_t>(value);
}

}  // namespace outbox::detail

// A list entry as an atomic, at its initial value.
#define OUTBOX_ATOMIC_STAT_FIELD(field, kind, show, metric, text, help) \
  ::outbox::detail::AtomicStat<::outbox::StatKind::kind> field{         \
      ::outbox::StatType<::outbox::StatKind::kind>::initial};
// Copies an atomic entry of `from` to the plain field of `to` (names fixed by OUTBOX_STAT_COPY).
#define OUTBOX_STAT_LOAD_ONE(field, ...) to.field = from.field.load(std::memory_order_relaxed);
// Every entry of LIST from an object of atomics to its plain struct.
#define OUTBOX_STAT_COPY(LIST, from_object, to_object) \
  do {                                                 \
    const auto& from = (from_object);                  \
    auto& to = (to_object);                            \
    LIST(OUTBOX_STAT_LOAD_ONE)                         \
  } while (false)

#define OUTBOX_STAT_SAMPLE_ONE(field, ...) \
  out.push_back({def++, ::outbox::detail::stat_value(read(object.field))});
// Every entry of LIST in `object` as StatSamples; `read` turns a field into its value (plain
// structs: identity; atomics: a relaxed load).
#define OUTBOX_STAT_SAMPLES(LIST, object_expr, read_fn)                   \
  [&] {                                                                   \
    static constexpr ::outbox::StatDef kDefs[] = {LIST(OUTBOX_STAT_DEF)}; \
    const auto& object = (object_expr);                                   \
    const auto read = (read_fn);                                          \
    std::vector<::outbox::StatSample> out;                                \
    out.reserve(std::size(kDefs));                                        \
    const ::outbox::StatDef* def = kDefs;                                 \
    LIST(OUTBOX_STAT_SAMPLE_ONE)                                          \
    return out;                                                           \
  }()

namespace outbox::detail {
inline constexpr auto kPlain = [](const auto& value) { return value; };
inline constexpr auto kRelaxed = [](const auto& value) {
  return value.load(std::memory_order_relaxed);
};
}  // namespace outbox::detail
