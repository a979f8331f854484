#pragma once
// The discard sink: a destination that publishes nothing.

#include <memory>

#include "outbox/sink.hpp"

namespace outbox {

// A sink that reports every send as published at once and sends nothing anywhere. For measuring
// what the database side alone allows (`outbox relay --sink discard`, `outbox-dev bench`) and for
// tests. Never point it at events anyone needs: they are marked published.
std::unique_ptr<Sink> make_discard_sink();

}  // namespace outbox
