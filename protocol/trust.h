// Who may do what (README, Security). The master binds every message to the peer that sent it: the
// key its connection proved (CURVE), with the roles the operator gave that key. A key's roles come
// from where the operator put it: the --authorized directory's workers/, clients/ or admins/
// (auth.h), or, without --auth, the operator's own local key, which has every role.
//
//   worker  may say hello and report on the jobs the master gave to its own connection
//   client  may submit studies, ask their status, list the workers, and cancel its own studies
//   admin   a client that may also cancel any study
//
// A master started with --insecure has no keys: every peer is anonymous and has every role.
//
// Commands named in a spec (an external searcher, an external trainer) run only where the operator
// of that process allowed their kind with --allow-exec KINDS (ExecKinds).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace hippo::protocol {

// Roles, as bits.
enum Role : uint32_t {
  kWorkerRole = 1,
  kClientRole = 2,
  kAdminRole = 4,
};
inline constexpr uint32_t kAllRoles = kWorkerRole | kClientRole | kAdminRole;

// The sender of a message as the master knows it.
struct PeerIdentity {
  std::string key;  // the Z85 public key its connection proved; "" for an anonymous peer
  uint32_t roles = 0;
  std::string name;  // the key's file name without .pub ("local" for the operator's own key)

  bool has(uint32_t role) const { return (roles & role) != 0; }
  bool anonymous() const { return key.empty(); }
  // For logs: "worker1 (key Ab3...)" or "an anonymous peer".
  std::string describe() const;
  bool operator==(const PeerIdentity&) const = default;
};

// The ZAP user id that carries a peer's identity from the authentication handler to the messages
// of its connection (ZeroMQ's "User-Id" property): "<roles> <key> <name>" (Z85 has no space).
std::string to_user_id(const PeerIdentity& peer);
// The identity in a user id; an empty user id (no authentication: --insecure) is an anonymous peer
// with every role. A malformed one is a peer with no role.
PeerIdentity from_user_id(std::string_view user_id);

// The kinds of spec commands a process may run (--allow-exec searcher,trainer).
struct ExecKinds {
  bool searcher = false;  // the master (or `hippo run`) runs a spec's external searcher
  bool trainer = false;   // a worker runs a spec's external trainer
  bool operator==(const ExecKinds&) const = default;
};
// Parses "searcher", "trainer", "searcher,trainer" (any order); std::invalid_argument naming the
// kinds otherwise.
ExecKinds parse_exec_kinds(std::string_view text);
std::string to_string(const ExecKinds& kinds);  // "searcher,trainer", "trainer", "" for none

}  // namespace hippo::protocol
