// Every message type (protocol/message.h) decodes what it encodes, and decoding refuses bad
// fields with the field's name.
#include "protocol/message.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "protocol/names.h"
#include "protocol/text.h"

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

// hippo's content hash is BLAKE2b-256 (libsodium's crypto_generichash, no key), the one Python's
// hashlib.blake2b(digest_size=32) computes: the trainer helper's (tests/python/test_trainer.py
// checks the same vector), so that a trainer and its worker agree on every file's hash.
TEST(Messages, TheContentHashIsBlake2b256AsHashlibComputesIt) {
  EXPECT_EQ(content_hash("abc"),
            "bddd813c634239723171ef3fee98579b94964e3bb1cb3e427262c8c068d52319");
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
  Hello on_host{"w1", "cpu", 2, 1, 77, {1, 2}};
  on_host.host = "node-3";
  expect_round_trip(on_host);
  expect_round_trip(Heartbeat{});
  expect_round_trip(Heartbeat{3, 17});
  expect_round_trip(Metric{3, 20, {{"accuracy", 0.5}, {"loss", 1.25}}});
  expect_round_trip(Snapshot{3, 30, 5, "state-x-5.ckpt", 1234, "", content_hash("x")});
  expect_round_trip(Done{3, 40, 1.5, {5, 6}});
  expect_round_trip(Failed{3, "disk full", true, "", {}});
  expect_round_trip(Failed{3, "corrupt", false, "state-x-2.ckpt", {1}});
  expect_round_trip(Abandoned{3, {5}});
  expect_round_trip(Welcome{"abcd", 200});
  expect_round_trip(job);
  Job lent = job;
  lent.threads = 2;
  expect_round_trip(lent);
  EXPECT_FALSE(job.to_json().contains("threads"));  // the worker's own: omitted
  expect_round_trip(SnapshotAt{3, {25, 9, "state-x-9.ckpt"}});
  expect_round_trip(Threads{3, 2});
  expect_round_trip(Abandon{3});
  expect_round_trip(Prepare{job.run});
  expect_round_trip(EndTrainer{});
  expect_round_trip(Reset{});
  expect_round_trip(Refused{"hello.storage: storage abc belongs to the key k"});
  expect_round_trip(Shutdown{});
  expect_round_trip(Submit{{{"name", "s"}}, "shared"});
  expect_round_trip(Status{4});
  expect_round_trip(Cancel{"my-study"});
  expect_round_trip(Cancel{7});
  expect_round_trip(Enqueue{"my-study", {{"lr", 0.1}}});
  expect_round_trip(ListWorkers{});
  expect_round_trip(Drain{"w1"});
  // A worker's reports carry the incarnation of the master that gave the job; a hello whether
  // its operator lets it run external trainers.
  Hello trainer{"w2", "cpu", 1, 1, 78, {}};
  trainer.runs_trainers = true;
  expect_round_trip(trainer);
  expect_round_trip(Heartbeat{3, 17, "abcd"});
  expect_round_trip(Metric{3, 20, {{"accuracy", 0.5}}, "abcd"});
  expect_round_trip(Snapshot{3, 30, 5, "state-x-5.ckpt", 1234, "abcd", content_hash("x")});
  expect_round_trip(Done{3, 40, 1.5, {5, 6}, "abcd"});
  // Where its time went: absent from an older worker's done (all zero), each part bounded.
  Done timed{3, 40, 1.5, {5, 6}, "abcd"};
  timed.times = {
      .start = 0.25, .setup = 0.1, .load = 0.01, .fetch = 0, .train = 1, .eval = 0.1, .save = 0.02};
  expect_round_trip(timed);
  json negative = timed.to_json();
  negative["times"]["train"] = -1;
  EXPECT_THROW(Done::from_json(negative), ProtocolError);
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
  expect_refused(R"({"v":1,"type":"threads","job":1,"threads":0})", "threads.threads");
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

// Checkpoints move between storages (no shared disk): a worker names its storage and its files,
// a job may say that its parent must be fetched, and chunks carry any bytes.
TEST(Messages, StoragesAndFileTransfersDecodeWhatTheyEncode) {
  const std::string file = "state-0123456789abcdef-7.ckpt";
  Hello hello{"w3", "cpu", 1, 1, 79, {}};
  hello.storage = std::string(32, 'a');
  hello.files = {file, file + ".tmp.00ff00ff00ff00ff"};
  expect_round_trip(hello);
  Job job;
  job.id = 4;
  job.run.model = {{"type", "mlp"}};
  job.run.data = "fashion-mnist";
  job.run.train_samples = 256;
  job.run.eval_samples = 64;
  job.run.fixed = json::object();
  job.from = 10;
  job.to = 20;
  job.parent_state = 7;
  job.parent_file = file;
  job.fetch_parent = true;
  job.parent_bytes = 5000;
  expect_round_trip(job);
  expect_round_trip(FetchParent{4, 1 << 20, "abcd"});
  std::string every_byte;
  for (int i = 0; i < 1000; ++i) every_byte += static_cast<char>(i % 256);
  expect_round_trip(FileBytes{4, 100, 5000, every_byte, ""});
  expect_round_trip(FileBytes{4, 0, 3 << 20, std::string(kChunkBytes, '\xff'), ""});
  expect_round_trip(FileBytes{4, 0, 0, "", "no worker that holds it is connected"});
  expect_round_trip(Fetched{4, 5000, 0.25, "abcd"});
  expect_round_trip(ReadFile{9, file, 0, kChunkBytes});
  expect_round_trip(DeleteFiles{{file}});
}

TEST(Messages, BadStorageAndTransferFieldsAreRefusedByName) {
  expect_refused(R"({"v":1,"type":"hello","name":"w","device":"cpu","threads":1,"pid":1,
                     "storage":"../x"})",
                 "hello.storage: not a storage identity");
  expect_refused(R"({"v":1,"type":"hello","name":"w","device":"cpu","threads":1,"pid":1,
                     "files":["/etc/passwd"]})",
                 "hello.files: not a checkpoint file name");
  expect_refused(R"({"v":1,"type":"read_file","read":1,"file":"secrets.txt","offset":0,
                     "length":10})",
                 "read_file.file");
  expect_refused(R"({"v":1,"type":"read_file","read":1,"file":"state-0123456789abcdef-7.ckpt",
                     "offset":0,"length":2000000})",
                 "read_file.length");
  expect_refused(R"({"v":1,"type":"file_bytes","read":1,"offset":0,"total":10,"data":"%%%"})",
                 "file_bytes.data: not base64");
  expect_refused(R"({"v":1,"type":"file_bytes","read":1,"offset":8,"total":10,"data":"AAAA"})",
                 "file_bytes.total: the bytes end past it");
  FileBytes big{1, 0, 1 << 22, std::string(kChunkBytes, 'x'), ""};
  json too_big = big.to_json();
  too_big["data"] = too_big["data"].get<std::string>() + "AAAA";
  expect_refused(too_big.dump(), "file_bytes.data");
  expect_refused(R"({"v":1,"type":"delete_files","files":["state-x.ckpt"]})",
                 "delete_files.files: not a checkpoint file name");
}

// Content hashes (issue 29): a snapshot reports its file's, a job names its parent's; each is ""
// (unknown, omitted on the wire) or 64 lowercase hex digits, nothing else and nothing longer.
TEST(Messages, ContentHashesAreHexOfFixedLength) {
  const std::string hash = content_hash("a state");
  EXPECT_EQ(hash.size(), kContentHashLength);
  EXPECT_EQ(content_hash_error(hash), "");
  Snapshot snapshot{.job = 1,
                    .step = 2,
                    .state = 3,
                    .file = "state-0123456789abcdef-3.ckpt",
                    .bytes = 100,
                    .incarnation = "abcd",
                    .checksum = hash};
  expect_round_trip(snapshot);
  // Issue 43: a file without its hash is refused, naming the field (it was recorded as '', which
  // every reader skips: a worker could downgrade to trainable forgeries). A state in memory only
  // has no file and no hash.
  snapshot.checksum = "";
  expect_refused(snapshot.to_json().dump(), "snapshot.checksum: missing");
  snapshot.file = "";
  expect_round_trip(snapshot);
  EXPECT_FALSE(snapshot.to_json().contains("checksum"));
  snapshot.file = "state-0123456789abcdef-3.ckpt";
  snapshot.checksum = hash;
  for (const std::string& bad : {hash.substr(1), hash + "0", std::string(64, 'A'),
                                 std::string(64, 'g'), std::string(100000, 'a')}) {
    json m = snapshot.to_json();
    m["checksum"] = bad;
    expect_refused(m.dump(), "snapshot.checksum");
  }
  Job order;
  order.id = 7;
  order.run.model = {{"type", "mlp"}};
  order.run.data = "fashion-mnist";
  order.run.train_samples = 8;
  order.run.eval_samples = 8;
  order.run.fixed = json::object();
  order.to = 4;
  order.parent_checksum = hash;
  expect_round_trip(order);
  json job = order.to_json();
  job["parent_checksum"] = hash;
  EXPECT_EQ(Job::from_json(job).parent_checksum, hash);
  job["parent_checksum"] = "zz";
  expect_refused(job.dump(), "job.parent_checksum");
}

// A diverging trial's loss is NaN or infinite: on the wire "nan", "inf", "-inf" (JSON has no such
// numbers, and nlohmann would write null); null, what older workers sent, is NaN.
TEST(Messages, NonFiniteMetricsCrossTheWire) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  Metric sent{
      3, 20, {{"accuracy", 0.5}, {"loss", std::nan("")}, {"up", kInf}, {"down", -kInf}}, "abcd"};
  const std::string body = serialize(sent.to_json());
  EXPECT_NE(body.find(R"("loss":"nan")"), std::string::npos) << body;
  EXPECT_NE(body.find(R"("up":"inf")"), std::string::npos) << body;
  EXPECT_NE(body.find(R"("down":"-inf")"), std::string::npos) << body;
  AnyMessage decoded = decode(parse(body));
  ASSERT_TRUE(std::holds_alternative<Metric>(decoded));
  const Metric& got = std::get<Metric>(decoded);
  EXPECT_EQ(got.job, 3);
  EXPECT_EQ(got.step, 20);
  EXPECT_EQ(got.incarnation, "abcd");
  EXPECT_EQ(got.metrics["accuracy"], 0.5);
  ASSERT_TRUE(got.metrics["loss"].is_number_float());
  EXPECT_TRUE(std::isnan(got.metrics["loss"].get<double>()));
  EXPECT_EQ(got.metrics["up"].get<double>(), kInf);
  EXPECT_EQ(got.metrics["down"].get<double>(), -kInf);
  EXPECT_EQ(serialize(got.to_json()), body);  // and again, the same bytes

  Metric old = Metric::from_json(parse(
      R"({"v":1,"type":"metric","job":1,"step":2,"metrics":{"loss":null},"incarnation":""})"));
  ASSERT_TRUE(old.metrics["loss"].is_number_float());
  EXPECT_TRUE(std::isnan(old.metrics["loss"].get<double>()));
}

TEST(Messages, MetricsAreNumbersAndBounded) {
  for (const char* value : {R"("abc")", R"("NaN")", "{}", "[1]", "true"})
    expect_refused(std::string(R"({"v":1,"type":"metric","job":1,"step":2,"metrics":{"loss":)") +
                       value + R"(},"incarnation":""})",
                   "metric.metrics.loss: not a number");
  Metric many{1, 2, json::object(), ""};
  for (size_t i = 0; i <= kMaxMetrics; ++i) many.metrics[std::to_string(i)] = 1.0;
  expect_refused(many.to_json().dump(), "metric.metrics: more than 256 names");
  many.metrics.erase("0");
  expect_round_trip(many);  // exactly kMaxMetrics
  Metric long_name{1, 2, {{std::string(kMaxMetricName + 1, 'n'), 1.0}}, ""};
  expect_refused(long_name.to_json().dump(), "metric.metrics: a name longer than 128 bytes");
}

// The field lists (fields.h) are what the encoders write: every key of an encoded message is a
// declared field (a reply's own fields aside), and each type of AnyMessage has a seed in the
// fuzzer's corpus that decodes to it and encodes to what it decodes.
template <typename... M>
std::map<std::string, std::vector<std::string>> declared_names(std::variant<M...>*) {
  return {{M::kType, fields::names<M>()}...};
}

// protocol/README.md's table of messages is written by hand, with what each field means: every
// field of every type's kFields must be named in its type's row (the table once lacked the
// snapshot's checksum and the job's parent_checksum).
TEST(Messages, TheReadmeTableNamesEveryDeclaredField) {
  std::ifstream in(HIPPO_PROTOCOL_README);
  ASSERT_TRUE(in) << HIPPO_PROTOCOL_README;
  std::map<std::string, std::string> rows;  // type -> the text of the rows that name it
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("| ", 0) != 0) continue;
    for (size_t at = line.find("`"); at != std::string::npos; at = line.find("`", at + 1)) {
      const size_t end = line.find("`", at + 1);
      if (end == std::string::npos) break;
      rows[line.substr(at + 1, end - at - 1)] += line;
      at = end;
    }
  }
  for (const auto& [type, names] : declared_names(static_cast<AnyMessage*>(nullptr))) {
    ASSERT_TRUE(rows.count(type)) << "protocol/README.md has no row for `" << type << "`";
    const std::string& row = rows.at(type);
    for (const std::string& name : names) {
      bool named = false;  // as a word of its own
      for (size_t at = row.find(name); at != std::string::npos && !named;
           at = row.find(name, at + 1)) {
        auto word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
        named = (at == 0 || !word(row[at - 1])) &&
                (at + name.size() >= row.size() || !word(row[at + name.size()]));
      }
      EXPECT_TRUE(named) << "protocol/README.md's row of `" << type << "` does not name its field "
                         << name;
    }
  }
}

TEST(Messages, EveryTypeHasAFuzzSeedAndWritesOnlyItsDeclaredFields) {
  const auto names = declared_names(static_cast<AnyMessage*>(nullptr));
  EXPECT_EQ(names.size(), std::variant_size_v<AnyMessage>);
  std::set<std::string> seen;
  for (const auto& entry : std::filesystem::directory_iterator(HIPPO_MESSAGE_CORPUS)) {
    std::ifstream in(entry.path());
    std::stringstream body;
    body << in.rdbuf();
    AnyMessage message;
    try {
      message = decode(parse(body.str()));
    } catch (const ProtocolError&) {
      continue;  // a seed of a bad message
    }
    const std::string type = type_of(message);
    seen.insert(type);
    const json wire = std::visit([](const auto& m) { return m.to_json(); }, message);
    // Decoding what it encodes gives the same message (compared by its bytes: a metric may hold
    // NaN, which equals nothing).
    const AnyMessage again = decode(parse(serialize(wire)));
    EXPECT_EQ(std::visit([](const auto& m) { return serialize(m.to_json()); }, again),
              serialize(wire))
        << entry.path();
    if (type == Reply::kType) continue;  // its fields are the request's
    const std::vector<std::string>& declared = names.at(type);
    for (const auto& [key, value] : wire.items())
      EXPECT_TRUE(key == "v" || key == "type" ||
                  std::find(declared.begin(), declared.end(), key) != declared.end())
          << entry.path() << ": " << key << " is not in " << type << "'s field list";
  }
  for (const auto& [type, fields] : names)
    EXPECT_TRUE(seen.count(type)) << "no seed in fuzz/corpus/message decodes to " << type;
}

// A worker's record of its latest job, as its hello carries it and as it keeps it in its storage
// (worker/job_record.h): the same fields both ways, and every step checked against the job's.
TEST(Messages, TheRecordOfAJobDecodesWhatItEncodesAndIsChecked) {
  DroppedJob record{.job = 7,
                    .trial = 3,
                    .from = 128,
                    .to = 256,
                    .reported = 192,
                    .reached = 200,
                    .incarnation = "0123456789abcdef"};
  record.snapshots = {{160, 9, "state-0123456789abcdef-9.ckpt", 4160, std::string(64, 'a')},
                      {192, 10, "state-0123456789abcdef-10.ckpt", 4160, std::string(64, 'b')}};
  record.metrics = {{128, {{"loss", 2.5}}}, {192, {{"loss", 0.5}, {"accuracy", 0.75}}}};
  record.busy_s = 3.5;
  EXPECT_EQ(DroppedJob::from_json(record.to_json()), record);
  // A diverging model's metrics are not finite; the record keeps them as the Metric message does.
  DroppedJob diverging = record;
  diverging.metrics[1].metrics["loss"] = std::nan("");
  const json kept = DroppedJob::from_json(diverging.to_json()).to_json();
  EXPECT_EQ(kept.dump(), diverging.to_json().dump());
  EXPECT_TRUE(std::isnan(DroppedJob::from_json(kept).metrics[1].metrics["loss"].get<double>()));
  record.reached = 256;
  record.done = true;
  Hello hello{"w4", "cpu", 1, 1, 80, {}};
  hello.dropped = {record};
  expect_round_trip(hello);

  auto refused = [](DroppedJob r, const std::string& field) {
    try {
      DroppedJob::from_json(r.to_json());
      ADD_FAILURE() << "accepted " << r.to_json().dump();
    } catch (const ProtocolError& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  DroppedJob past = record;
  past.snapshots[1].step = 300;  // past `reached`
  refused(past, "hello.dropped.snapshots.step");
  DroppedJob unordered = record;
  std::swap(unordered.metrics[0], unordered.metrics[1]);
  refused(unordered, "hello.dropped.metrics.step");
  DroppedJob unfinished = record;
  unfinished.done = false;
  unfinished.diverged = true;
  refused(unfinished, "hello.dropped.diverged");
  DroppedJob unhashed = record;
  unhashed.snapshots[0].checksum = "";
  refused(unhashed, "checksum");
  DroppedJob escaping = record;
  escaping.snapshots[0].file = "../../etc/passwd";
  refused(escaping, "file");
}

}  // namespace
// Text from outside made safe for a terminal: controls escaped, UTF-8 kept.
// Issue 43: a trainer's or a searcher's stderr, line by line, each line escaped and named: a clear
// screen, a terminal title and a forged log line are shown as text, after the prefix.
TEST(Printable, OutputOfAnotherProcessIsCutIntoNamedEscapedLines) {
  PrintableLines lines("[trainer 42] ");
  EXPECT_EQ(lines.add("\x1b[2Jcleared\n\x1b]0;owned\x07ti"), "[trainer 42] \\x1b[2Jcleared\n");
  EXPECT_EQ(lines.add("tle\r\n[2099-01-01 00:00:00.000] [run] [info] study x: done (forged)\n"),
            "[trainer 42] \\x1b]0;owned\\x07title\n"
            "[trainer 42] [2099-01-01 00:00:00.000] [run] [info] study x: done (forged)\n");
  EXPECT_EQ(lines.add("no newline"), "");
  EXPECT_EQ(lines.flush(), "[trainer 42] no newline\n");
  EXPECT_EQ(lines.flush(), "");
  // A line without end is cut: memory stays bounded.
  const std::string cut = lines.add(std::string(PrintableLines::kMaxLineBytes + 5, 'a'));
  EXPECT_EQ(cut, "[trainer 42] " + std::string(PrintableLines::kMaxLineBytes, 'a') + "\n");
  EXPECT_EQ(lines.flush(), "[trainer 42] aaaaa\n");
}

// Issue 43: "#N" and digits name an id, everywhere (names.h); a name never reads as an id, and is
// bounded where every message that names a study can carry it.
TEST(Names, IdsAndNamesNeverCollide) {
  EXPECT_EQ(study_id_in("#3"), 3);
  EXPECT_EQ(study_id_in("3"), 3);
  for (const char* name : {"", "#", "x3", "#3x", "3 ", "##3", "-3", "#1234567890123456789"})
    EXPECT_FALSE(study_id_in(name)) << name;
  EXPECT_EQ(study_name_error("lr-decay"), "");
  EXPECT_EQ(study_name_error("3d"), "");
  EXPECT_NE(study_name_error("42").find("reads as a study id"), std::string::npos);
  EXPECT_NE(study_name_error("#42").find("reads as a study id"), std::string::npos);
  EXPECT_EQ(study_name_error(std::string(kMaxStudyName, 'n')), "");
  EXPECT_NE(study_name_error(std::string(kMaxStudyName + 1, 'n')).find("at most 256"),
            std::string::npos);
  EXPECT_NO_THROW(Cancel::from_json(Cancel{std::string(kMaxStudyName, 'n')}.to_json()));
  EXPECT_NO_THROW(Resume::from_json(Resume{"#7"}.to_json()));
}

TEST(Printable, EscapesControlCharactersAndKeepsTheRest) {
  EXPECT_EQ(printable("plain name, é and 日本"), "plain name, é and 日本");
  EXPECT_EQ(printable("a\x1b[2Jb\nc\rd\x7f"), "a\\x1b[2Jb\\x0ac\\x0dd\\x7f");
  EXPECT_EQ(printable(std::string("nul\0!", 5)), "nul\\x00!");
  EXPECT_EQ(printable("csi \xc2\x9b and nbsp \xc2\xa0"), "csi \\u009b and nbsp \xc2\xa0");
}

}  // namespace hippo::protocol
