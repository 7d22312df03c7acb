// Every message type (protocol/message.h) decodes what it encodes, and decoding refuses bad
// fields with the field's name.
#include "protocol/message.h"

#include <gtest/gtest.h>

namespace hippo::protocol {
namespace {

template <typename M>
void expect_round_trip(const M& m) {
  json wire = parse(serialize(m.to_json()));
  EXPECT_EQ(wire["type"], M::kType);
  AnyMessage decoded = decode(wire);
  ASSERT_TRUE(std::holds_alternative<M>(decoded)) << wire.dump();
  EXPECT_EQ(std::get<M>(decoded), m) << wire.dump();
  EXPECT_STREQ(type_of(decoded), M::kType);
}

TEST(Messages, EveryTypeDecodesWhatItEncodes) {
  Job job;
  job.id = 3;
  job.run.model = {{"type", "mlp"}, {"hidden", {8}}};
  job.run.data = "fashion-mnist";
  job.run.train_samples = 256;
  job.run.eval_samples = 64;
  job.run.fixed = {{"batch_size", 32}};
  job.hyperparams = {{"lr", Sequence::constant(0.1)}};
  job.from = 10;
  job.to = 40;
  job.parent_state = 2;
  job.parent_file = "state-x-2.ckpt";
  job.eval_steps = {20, 40};
  job.snapshots = {{30, 5, "state-x-5.ckpt"}, {40, 6, ""}};
  expect_round_trip(Hello{"w1", "cpu", 2, 1, 77, {1, 2}});
  expect_round_trip(Heartbeat{});
  expect_round_trip(Heartbeat{3, 17});
  expect_round_trip(Metric{3, 20, {{"accuracy", 0.5}, {"loss", 1.25}}});
  expect_round_trip(Snapshot{3, 30, 5, "state-x-5.ckpt", 1234});
  expect_round_trip(Done{3, 40, 1.5, {5, 6}});
  expect_round_trip(Failed{3, "disk full", true, "", {}});
  expect_round_trip(Failed{3, "corrupt", false, "state-x-2.ckpt", {1}});
  expect_round_trip(Abandoned{3, {5}});
  expect_round_trip(Welcome{"abcd", 200});
  expect_round_trip(job);
  expect_round_trip(SnapshotAt{3, {25, 9, "state-x-9.ckpt"}});
  expect_round_trip(Abandon{3});
  expect_round_trip(Reset{});
  expect_round_trip(Shutdown{});
  expect_round_trip(Submit{{{"name", "s"}}, "shared"});
  expect_round_trip(Status{4});
  expect_round_trip(Cancel{"my-study"});
  expect_round_trip(Cancel{7});
  expect_round_trip(ListWorkers{});
  // A worker's reports carry the incarnation of the master that gave the job; a hello whether
  // its operator lets it run external trainers.
  Hello trainer{"w2", "cpu", 1, 1, 78, {}};
  trainer.runs_trainers = true;
  expect_round_trip(trainer);
  expect_round_trip(Heartbeat{3, 17, "abcd"});
  expect_round_trip(Metric{3, 20, {{"accuracy", 0.5}}, "abcd"});
  expect_round_trip(Snapshot{3, 30, 5, "state-x-5.ckpt", 1234, "abcd"});
  expect_round_trip(Done{3, 40, 1.5, {5, 6}, "abcd"});
  expect_round_trip(Failed{3, "disk full", true, "", {}, "abcd"});
  expect_round_trip(Abandoned{3, {5}, "abcd"});
  expect_round_trip(Reply{true, "", {{"study", 4}, {"name", "s"}}});
  expect_round_trip(Reply{false, "no study 9", json::object()});
}

void expect_refused(const std::string& body, const std::string& error) {
  try {
    decode(parse(body));
    ADD_FAILURE() << "accepted " << body;
  } catch (const ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find(error), std::string::npos) << e.what();
  }
}

TEST(Messages, BadFieldsAreRefusedByName) {
  expect_refused(R"({"v":1,"type":"launch"})", "message.type: unknown type \"launch\"");
  expect_refused(R"({"v":1,"type":"metric","job":1,"step":2,"metrics":{"a":"x"}})",
                 "metric.metrics.a: not a number");
  expect_refused(R"({"v":1,"type":"snapshot_at","job":1,"step":4,"state":2,"file":"../x"})",
                 "snapshot_at.file");
  expect_refused(R"({"v":1,"type":"hello","name":"w","device":"cpu","threads":1,"pid":1,
                     "held":"all"})",
                 "hello.held: expected an array");
  json done = Done{1, 2, 1.0, {}}.to_json();
  done["held"] = std::vector<int64_t>(kMaxHeldStates + 1, 3);
  expect_refused(done.dump(), "done.held: more than");
  expect_refused(R"({"v":1,"type":"failed","job":1,"error":"e","retry":"yes"})",
                 "failed.retry: expected a boolean");
  expect_refused(R"({"v":1,"type":"job","job":7,"run":{}})", "job.run.model: missing");
  expect_refused(R"({"v":1,"type":"cancel","study":[1]})", "cancel.study");
  expect_refused(R"({"v":1,"type":"welcome","heartbeat_ms":1})", "welcome.heartbeat_ms");
  expect_refused(R"({"v":1,"type":"done","job":1,"step":2,"busy_s":1})",
                 "done.incarnation: missing");
  expect_refused(R"({"v":1,"type":"heartbeat","job":1,"step":2})",
                 "heartbeat.incarnation: missing");
  json long_incarnation =
      Metric{1, 2, json::object(), std::string(kMaxIncarnation + 1, 'a')}.to_json();
  expect_refused(long_incarnation.dump(), "metric.incarnation");
}

}  // namespace
}  // namespace hippo::protocol
