// split_time: each worker's time over a study's window, from its executions.
#include "storage/time_split.h"

#include <gtest/gtest.h>

namespace hippo {
namespace {

ExecutionRow job(const std::string& worker, double started, double ended,
                 std::optional<double> busy, nlohmann::json times,
                 ExecutionOutcome outcome = ExecutionOutcome::kDone) {
  ExecutionRow r;
  r.worker = worker;
  r.started_at = started;
  r.ended_at = ended;
  r.outcome = outcome;
  r.busy_s = busy;
  r.times = std::move(times);
  return r;
}

double part(const WorkerTime& w, const std::string& name) {
  return w.to_json().at(name + "_s").get<double>();
}

TEST(TimeSplit, EachWorkersPartsAddToTheWindow) {
  const TimeSplit split = split_time(
      {job("a", 0, 4, 3.5, {{"setup", 0.5}, {"train", 2.5}, {"eval", 0.25}, {"evaluations", 2}}),
       job("b", 1, 3, 2, {{"train", 2}}),
       job("a", 5, 6, 1, {{"train", 0.75}, {"save", 0.125}, {"evaluations", 1}}),
       job("b", 3, 8, std::nullopt, nlohmann::json::object(), ExecutionOutcome::kFailed)},
      10);
  ASSERT_EQ(split.workers.size(), 2u);
  const WorkerTime& a = split.workers[0];
  EXPECT_EQ(a.worker, "a");
  EXPECT_EQ(a.jobs, 2);
  EXPECT_DOUBLE_EQ(part(a, "setup"), 0.5);
  EXPECT_DOUBLE_EQ(part(a, "train"), 3.25);
  EXPECT_DOUBLE_EQ(part(a, "eval"), 0.25);
  EXPECT_DOUBLE_EQ(part(a, "save"), 0.125);
  EXPECT_DOUBLE_EQ(part(a, "other"), 0.375);   // 4.5 busy, 4.125 of it named
  EXPECT_DOUBLE_EQ(part(a, "dispatch"), 0.5);  // 5 s at the master, 4.5 on the worker
  EXPECT_DOUBLE_EQ(part(a, "idle"), 5);
  EXPECT_DOUBLE_EQ(a.total(), 10);
  EXPECT_EQ(a.evaluations, 3);  // a count, not a part of the time
  EXPECT_EQ(a.to_json().at("evaluations"), 3);
  const WorkerTime& b = split.workers[1];
  EXPECT_DOUBLE_EQ(part(b, "train"), 2);
  EXPECT_DOUBLE_EQ(part(b, "unfinished"), 5);  // a failed job: its whole time
  EXPECT_DOUBLE_EQ(part(b, "idle"), 3);
  EXPECT_DOUBLE_EQ(b.total(), 10);
  EXPECT_EQ(split.all.jobs, 4);
  EXPECT_EQ(split.all.evaluations, 3);
  EXPECT_DOUBLE_EQ(split.all.total(), 20);
  EXPECT_DOUBLE_EQ(part(split.all, "train"), 5.25);
}

TEST(TimeSplit, WhatAWorkerClaimsIsBoundedByWhatWasSeen) {
  // A worker that says it trained for longer than the job took (or whose parts exceed its busy
  // time) gets no more than the job's time; a job past the window leaves no idle time.
  const TimeSplit split = split_time({job("a", 0, 2, 50, {{"train", 1e6}, {"eval", 3}}),
                                      job("a", 2, 4, 1, nlohmann::json::object())},
                                     3);
  const WorkerTime& a = split.workers.at(0);
  EXPECT_DOUBLE_EQ(part(a, "train"), 2);
  EXPECT_DOUBLE_EQ(part(a, "eval"), 0);
  EXPECT_DOUBLE_EQ(part(a, "other"), 1);  // a job with no parts: all of its busy time
  EXPECT_DOUBLE_EQ(part(a, "dispatch"), 1);
  EXPECT_DOUBLE_EQ(part(a, "idle"), 0);
}

TEST(TimeSplit, RowsFromBeforeTheirPartsCountAsOther) {
  const TimeSplit split = split_time({job("a", 0, 2, std::nullopt, nlohmann::json::object())}, 4);
  EXPECT_DOUBLE_EQ(part(split.workers.at(0), "other"), 2);
  EXPECT_DOUBLE_EQ(part(split.workers.at(0), "idle"), 2);
  EXPECT_TRUE(split_time({}, 4).workers.empty());
}

}  // namespace
}  // namespace hippo
