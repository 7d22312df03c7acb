// What the tests that drive a searcher through long random event sequences share: operations as
// text, and a master stand-in that carries out Trains in a random order (halving_reference_test.cc,
// multi_objective_test.cc).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "searchers/searcher.h"

namespace hippo::testing {

// Operations as text, so that a difference reads well.
inline std::vector<std::string> describe(const std::vector<Operation>& ops) {
  std::vector<std::string> out;
  for (const Operation& op : ops) {
    std::ostringstream s;
    if (const Create* c = std::get_if<Create>(&op)) {
      s << "create " << c->trial << " " << c->params.dump() << (c->fork ? " fork" : "");
    } else if (const Train* t = std::get_if<Train>(&op)) {
      s << "train " << t->trial << " to " << t->length << ", evaluated at";
      for (int64_t e : t->eval_steps) s << " " << e;
    } else if (const Stop* st = std::get_if<Stop>(&op)) {
      s << "stop " << st->trial;
    } else {
      s << "finish";
    }
    out.push_back(s.str());
  }
  return out;
}

// A master that carries out Trains in a random order: each event is the next evaluation of a
// random Train in flight (now and then missing), its close, or a failure; now and then an event
// that comes late (a close after a Stop, a validation of a closed trial).
class RandomMaster {
 public:
  struct Event {
    enum Kind { kValidation, kClosed, kFailed, kNextBatch } kind;
    RequestId trial = 0;
    int64_t step = 0;
    double value = 0;
  };

  explicit RandomMaster(uint64_t seed) : rng_(seed) {}

  bool finished() const { return finished_; }
  bool idle() const { return flight_.empty(); }

  void take(const std::vector<Operation>& ops) {
    for (const Operation& op : ops) {
      if (const Create* c = std::get_if<Create>(&op)) created_ = std::max(created_, c->trial + 1);
      if (const Train* t = std::get_if<Train>(&op)) {
        flight_.push_back({t->trial, t->eval_steps, 0});
        lengths_.push_back(t->length);
      }
      if (const Stop* s = std::get_if<Stop>(&op); s && coin(2))  // else it closes late
        std::erase_if(flight_, [&](const Flight& f) { return f.trial == s->trial; });
      if (std::holds_alternative<Finish>(op)) finished_ = true;
    }
  }

  Event next() {
    if (coin(50)) return {Event::kNextBatch};
    if (coin(30) && created_ > 0) {  // about any trial, running or not
      RequestId id = static_cast<RequestId>(rng_() % created_);
      if (coin(3)) return {Event::kClosed, id};
      if (coin(4)) return {Event::kFailed, id};
      return {Event::kValidation, id, lengths_[rng_() % lengths_.size()], value()};
    }
    size_t i = rng_() % flight_.size();
    Flight& f = flight_[i];
    while (f.next < f.evals.size()) {
      int64_t step = f.evals[f.next++];
      if (coin(25)) return fail(i);
      if (!coin(15))
        return {Event::kValidation, f.trial, step, value()};  // else its metric is missing
    }
    if (coin(20)) return fail(i);
    Event e{Event::kClosed, f.trial};
    flight_.erase(flight_.begin() + static_cast<std::ptrdiff_t>(i));
    return e;
  }

 private:
  struct Flight {
    RequestId trial;
    std::vector<int64_t> evals;
    size_t next;
  };

  bool coin(uint64_t one_in) { return rng_() % one_in == 0; }

  Event fail(size_t i) {
    Event e{Event::kFailed, flight_[i].trial};
    flight_.erase(flight_.begin() + static_cast<std::ptrdiff_t>(i));
    return e;
  }

  // Many ties (a few values, and 0 against -0), some values that are not finite, and noise.
  double value() {
    switch (rng_() % 10) {
      case 0:
      case 1:
      case 2:
        return static_cast<double>(rng_() % 4) / 4;
      case 3:
        return coin(2) ? 0.0 : -0.0;
      case 4: {
        const double inf = std::numeric_limits<double>::infinity();
        const double odd[] = {std::nan(""), inf, -inf};
        return odd[rng_() % 3];
      }
      default:
        return std::uniform_real_distribution<double>(-1, 1)(rng_);
    }
  }

  std::mt19937_64 rng_;
  std::vector<Flight> flight_;
  std::vector<int64_t> lengths_;
  RequestId created_ = 0;
  bool finished_ = false;
};

}  // namespace hippo::testing
