#pragma once
// Two focused scenarios beside the random campaign (see docs/GUARANTEES.md):
//  - stalled relay: a backlog of tens of thousands of events builds while no relay runs; two
//    relays then drain it. Reports the drain time, that order held, and that the database load
//    stayed bounded (rows a claim touches, the slowest relay statement).
//  - hot aggregates: many writers on a few aggregates, transactions held open for random times
//    so commit order differs from start order; relays run throughout. Nothing may be skipped or
//    inverted.

#include <string>

namespace outbox::campaign {

struct ScenarioOptions {
  std::string outbox_binary;
  std::string self_binary;
  int events = 30000;
  int aggregates = 1000;
  int writers = 8;
  int seconds = 10;
  bool keep = false;
};

int run_stalled_relay(const ScenarioOptions& options);
int run_hot_aggregates(const ScenarioOptions& options);

}  // namespace outbox::campaign
