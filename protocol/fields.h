// A message's fields, declared once. Every struct of message.h lists its wire fields next to its
// members, in order, as `static constexpr auto kFields = std::tuple{...}`: one descriptor per
// field, with its wire name, the member it fills, its bounds and its check. write() and read()
// below walk that list; so do the message fuzzer and the tests. The encoder, the decoder and the
// bounds cannot disagree, and a new field is one line.
//
//   Int{"step", &Snapshot::step, 1}               an integer in [1, INT64_MAX]
//   Text{"file", &Snapshot::file, 200, check}     at most 200 bytes, that the check accepts
//   IntList{"held", &Done::held, kMaxHeldStates}  at most that many integers, each >= 0
//
// How a field may be absent (required unless a modifier says otherwise):
//   required       always written; a message without it is refused ("<type>.<field>: missing")
//   .defaulted()   always written; absent (an older sender): the member keeps its default
//   .omitted()     written only when it differs from the default; absent: the default
//   .when(pred)    there only when pred(message) holds: written then, read then (pred sees the
//                  fields listed before it, already decoded)
// What spans fields (Job: every eval step inside [from, to]) is the struct's `void check() const`,
// which read() runs once the fields are decoded. A field that needs its own wire form (base64, a
// metric's "nan", the reply's flattened fields) is a Custom with a writer and a reader.
//
// Readers throw ProtocolError("<type>.<field>: ..."), the type being the message's "type"; a
// nested object is named by where it is ("job.run.pipeline.stages").
#pragma once

#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "protocol/wire.h"

namespace hippo::protocol::fields {

enum class Presence { kRequired, kDefaulted, kOmitted };

// Why a decoded string is refused, or "" when it is not (message.h's checks::).
using Check = std::string (*)(const std::string&);

// What every descriptor has. Self is the descriptor's own type (its modifiers return a changed
// copy, so that a list stays one constexpr expression); M is the struct it fills.
template <class Self, class M>
struct Field {
  using Message = M;
  const char* name;
  Presence presence = Presence::kRequired;
  bool (*condition)(const M&) = nullptr;  // .when(): null, always

  constexpr explicit Field(const char* name) : name(name) {}
  constexpr Self defaulted() const { return with(Presence::kDefaulted, condition); }
  constexpr Self omitted() const { return with(Presence::kOmitted, condition); }
  constexpr Self when(bool (*pred)(const M&)) const { return with(presence, pred); }

 private:
  constexpr Self with(Presence p, bool (*pred)(const M&)) const {
    Self copy = static_cast<const Self&>(*this);
    copy.presence = p;
    copy.condition = pred;
    return copy;
  }
};

// An integer member (int64_t, int or uint64_t) in [min, max].
template <class M, class T>
struct Int : Field<Int<M, T>, M> {
  T M::*member;
  int64_t min, max;
  constexpr Int(const char* name, T M::*member, int64_t min = 0, int64_t max = INT64_MAX)
      : Field<Int, M>(name), member(member), min(min), max(max) {}
  void write(const M& from, json& m) const { m[this->name] = from.*member; }
  void read(const json& m, M& to) const {
    to.*member = static_cast<T>(get_int(m, this->name, min, max));
  }
};

// A number in [min, max): a duration (NaN is refused; JSON has none anyway).
template <class M>
struct Real : Field<Real<M>, M> {
  double M::*member;
  double min, max;
  constexpr Real(const char* name, double M::*member, double min, double max)
      : Field<Real, M>(name), member(member), min(min), max(max) {}
  void write(const M& from, json& m) const { m[this->name] = from.*member; }
  void read(const json& m, M& to) const {
    const double v = get_number(m, this->name);
    if (!(v >= min && v < max)) refuse(m, this->name, "out of range");
    to.*member = v;
  }
};

// A boolean. Never required: an absent one keeps the member's default (false everywhere).
template <class M>
struct Bool : Field<Bool<M>, M> {
  bool M::*member;
  constexpr Bool(const char* name, bool M::*member) : Field<Bool, M>(name), member(member) {}
  void write(const M& from, json& m) const { m[this->name] = from.*member; }
  void read(const json& m, M& to) const { to.*member = get_bool(m, this->name, to.*member); }
};

// A string of at most max_length bytes that `check` (if any) accepts.
template <class M>
struct Text : Field<Text<M>, M> {
  std::string M::*member;
  size_t max_length;
  Check check;
  constexpr Text(const char* name, std::string M::*member, size_t max_length, Check check = nullptr)
      : Field<Text, M>(name), member(member), max_length(max_length), check(check) {}
  void write(const M& from, json& m) const { m[this->name] = from.*member; }
  void read(const json& m, M& to) const {
    std::string value = get_string(m, this->name, max_length);
    if (check) {
      const std::string why = check(value);
      if (!why.empty()) refuse(m, this->name, why);
    }
    to.*member = std::move(value);
  }
};

// At most max_items integers, each >= 0.
template <class M>
struct IntList : Field<IntList<M>, M> {
  std::vector<int64_t> M::*member;
  size_t max_items;
  constexpr IntList(const char* name, std::vector<int64_t> M::*member, size_t max_items)
      : Field<IntList, M>(name), member(member), max_items(max_items) {}
  void write(const M& from, json& m) const { m[this->name] = from.*member; }
  void read(const json& m, M& to) const { to.*member = get_int_list(m, this->name, max_items); }
};

// At most max_items strings, each one that `is` accepts ("not a <noun>: <the item>" otherwise).
template <class M>
struct Names : Field<Names<M>, M> {
  std::vector<std::string> M::*member;
  size_t max_items;
  bool (*is)(const std::string&);
  const char* noun;
  constexpr Names(const char* name, std::vector<std::string> M::*member, size_t max_items,
                  bool (*is)(const std::string&), const char* noun)
      : Field<Names, M>(name), member(member), max_items(max_items), is(is), noun(noun) {}
  void write(const M& from, json& m) const { m[this->name] = from.*member; }
  void read(const json& m, M& to) const {
    const json& list = get_array(m, this->name);
    if (list.size() > max_items)
      refuse(m, this->name, "more than " + std::to_string(max_items) + " names");
    std::vector<std::string> out;
    out.reserve(list.size());
    for (const json& item : list) {
      if (!item.is_string() || !is(item.get_ref<const std::string&>()))
        refuse(m, this->name, std::string("not a ") + noun + ": " + item.dump().substr(0, 100));
      out.push_back(item.get<std::string>());
    }
    to.*member = std::move(out);
  }
};

// A JSON object, kept as it is (what it holds is checked by whoever uses it: a study spec).
template <class M>
struct Object : Field<Object<M>, M> {
  json M::*member;
  constexpr Object(const char* name, json M::*member) : Field<Object, M>(name), member(member) {}
  void write(const M& from, json& m) const { m[this->name] = from.*member; }
  void read(const json& m, M& to) const { to.*member = get_object(m, this->name); }
};

// A field with a wire form of its own: writer(m, name, value) puts it into the message, reader(m,
// name) gets it out (throwing ProtocolError). A required Custom's reader is called even when the
// field is absent, and decides (Reply's error: absent is "refused").
template <class M, class T>
struct Custom : Field<Custom<M, T>, M> {
  T M::*member;
  void (*writer)(json& m, const char* name, const T& value);
  T (*reader)(const json& m, const char* name);
  constexpr Custom(const char* name, T M::*member, void (*writer)(json&, const char*, const T&),
                   T (*reader)(const json&, const char*))
      : Field<Custom, M>(name), member(member), writer(writer), reader(reader) {}
  void write(const M& from, json& m) const { writer(m, this->name, from.*member); }
  void read(const json& m, M& to) const { to.*member = reader(m, this->name); }
};

template <class M>
void write(const M& from, json& m);
template <class M>
M read(const json& m);

// A copy of a nested object that names where it is (its "type", which wire.h's readers use to
// name a field): {"type": "job.run", ...the object}.
inline json nested(const json& object, const std::string& where) {
  json copy = object;
  copy["type"] = where;
  return copy;
}

// An object with T's own field list (Job's run).
template <class M, class T>
struct Nested : Field<Nested<M, T>, M> {
  T M::*member;
  constexpr Nested(const char* name, T M::*member) : Field<Nested, M>(name), member(member) {}
  void write(const M& from, json& m) const {
    json object = json::object();
    fields::write(from.*member, object);
    m[this->name] = std::move(object);
  }
  void read(const json& m, M& to) const {
    to.*member = fields::read<T>(nested(get_object(m, this->name), field_path(m, this->name)));
  }
};

// At most max_items objects, each with T's field list (Job's snapshots).
template <class M, class T>
struct NestedList : Field<NestedList<M, T>, M> {
  std::vector<T> M::*member;
  size_t max_items;
  constexpr NestedList(const char* name, std::vector<T> M::*member, size_t max_items)
      : Field<NestedList, M>(name), member(member), max_items(max_items) {}
  void write(const M& from, json& m) const {
    json list = json::array();
    for (const T& item : from.*member) {
      json object = json::object();
      fields::write(item, object);
      list.push_back(std::move(object));
    }
    m[this->name] = std::move(list);
  }
  void read(const json& m, M& to) const {
    const json& list = get_array(m, this->name);
    if (list.size() > max_items)
      refuse(m, this->name, "more than " + std::to_string(max_items) + " items");
    const std::string where = field_path(m, this->name);
    std::vector<T> out;
    out.reserve(list.size());
    for (const json& item : list) {
      if (!item.is_object()) refuse(m, this->name, "expected objects");
      out.push_back(fields::read<T>(nested(item, where)));
    }
    to.*member = std::move(out);
  }
};

// An object on the wire whose fields are members of M itself (RunSpec's "pipeline": stages,
// microbatches, ...). Its inner fields are required once the object is there, unless marked
// otherwise (.omitted(): one that an older sender does not know).
template <class M, class Inner>
struct Group : Field<Group<M, Inner>, M> {
  Inner inner;  // a tuple of descriptors over M
  constexpr Group(const char* name, Inner inner) : Field<Group, M>(name), inner(inner) {}
  void write(const M& from, json& m) const {
    json object = json::object();
    std::apply([&](const auto&... f) { (write_field(f, from, object), ...); }, inner);
    m[this->name] = std::move(object);
  }
  void read(const json& m, M& to) const {
    const json object = nested(get_object(m, this->name), field_path(m, this->name));
    std::apply([&](const auto&... f) { (read_field(f, object, to), ...); }, inner);
  }
};
template <class F0, class... F>
Group(const char*, std::tuple<F0, F...>) -> Group<typename F0::Message, std::tuple<F0, F...>>;

// A member struct T whose fields are written flat into M's object (SnapshotAt's order: step,
// state and file next to job). Always there: it has no name of its own.
template <class M, class T>
struct Inline : Field<Inline<M, T>, M> {
  using Flat = T;
  T M::*member;
  constexpr explicit Inline(T M::*member) : Field<Inline, M>(nullptr), member(member) {}
  void write(const M& from, json& m) const { fields::write(from.*member, m); }
  void read(const json& m, M& to) const { to.*member = fields::read<T>(m); }
};

// ---------------------------------------------------------------------------------------------
// Walking a list.

// A default-made M: what an absent field keeps, and what an omitted one is compared with.
template <class M>
const M& defaults() {
  static const M value{};
  return value;
}

template <class M, class F>
void write_field(const F& f, const M& from, json& m) {
  if (f.condition && !f.condition(from)) return;
  if constexpr (requires { f.member; }) {
    if (f.presence == Presence::kOmitted && from.*f.member == defaults<M>().*f.member) return;
  }
  f.write(from, m);
}

template <class M, class F>
void read_field(const F& f, const json& m, M& to) {
  if (f.condition && !f.condition(to)) return;
  if (f.presence != Presence::kRequired && !(m.is_object() && m.contains(f.name))) return;
  f.read(m, to);
}

// Writes M's fields into m (a message's envelope, or a nested object).
template <class M>
void write(const M& from, json& m) {
  std::apply([&](const auto&... f) { (write_field(f, from, m), ...); }, M::kFields);
}

// Reads M's fields from m in the order of its list, then runs its check().
template <class M>
M read(const json& m) {
  M to{};
  std::apply([&](const auto&... f) { (read_field(f, m, to), ...); }, M::kFields);
  if constexpr (requires { to.check(); }) to.check();
  return to;
}

// The wire names of M's fields, in order (an Inline's are its struct's; a Group's is its
// object's): for the fuzzer and the tests.
template <class M>
std::vector<std::string> names() {
  std::vector<std::string> out;
  auto add = [&](const auto& f) {
    using F = std::decay_t<decltype(f)>;
    if constexpr (requires { typename F::Flat; }) {
      for (std::string& n : names<typename F::Flat>()) out.push_back(std::move(n));
    } else {
      out.push_back(f.name);
    }
  };
  std::apply([&](const auto&... f) { (add(f), ...); }, M::kFields);
  return out;
}

}  // namespace hippo::protocol::fields
