#pragma once
// `outbox-dev bench`'s report: every scenario's JSON object as it finishes (stdout), then a table,
// the machine line, and results.json with every object and the machine's.

#include <nlohmann/json.hpp>
#include <vector>

#include "bench.hpp"

namespace outbox::cli::bench {

// What the figures were measured on: they mean little without it.
nlohmann::json machine(const Setup& setup);

// The table, the machine line and results.json in the --out folder.
void finish_report(const BenchOptions& options, const std::vector<nlohmann::json>& results,
                   const nlohmann::json& about);

}  // namespace outbox::cli::bench
