#pragma once
// Everything Kafka in one include: the sink (outbox/kafka_sink.hpp) and the inbox consumer
// (outbox/kafka_consumer.hpp). Link outbox::kafka.

#include "outbox/kafka_consumer.hpp"
#include "outbox/kafka_sink.hpp"
