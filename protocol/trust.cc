#include "protocol/trust.h"

#include <charconv>
#include <stdexcept>

#include "protocol/text.h"

namespace hippo::protocol {

std::string PeerIdentity::describe() const {
  if (anonymous()) return "an anonymous peer";
  return name + " (key " + key.substr(0, 8) + "...)";
}

std::string to_user_id(const PeerIdentity& peer) {
  return std::to_string(peer.roles) + " " + peer.key + " " + peer.name;
}

PeerIdentity from_user_id(std::string_view user_id) {
  PeerIdentity peer;
  if (user_id.empty()) {
    peer.roles = kAllRoles;
    return peer;
  }
  const size_t first = user_id.find(' ');
  const size_t second = first == std::string_view::npos ? first : user_id.find(' ', first + 1);
  uint32_t roles = 0;
  if (second == std::string_view::npos ||
      std::from_chars(user_id.data(), user_id.data() + first, roles).ptr != user_id.data() + first)
    return peer;  // no role
  peer.key = std::string(user_id.substr(first + 1, second - first - 1));
  peer.name = std::string(user_id.substr(second + 1));
  if (!peer.key.empty()) peer.roles = roles & kAllRoles;
  return peer;
}

ExecKinds parse_exec_kinds(std::string_view text) {
  ExecKinds kinds;
  for (std::string_view kind : comma_separated(text)) {
    if (kind == "searcher")
      kinds.searcher = true;
    else if (kind == "trainer")
      kinds.trainer = true;
    else
      throw std::invalid_argument(
          "expected the kinds of commands to allow: searcher, trainer or "
          "searcher,trainer; got \"" +
          std::string(text) + "\"");
  }
  return kinds;
}

std::string to_string(const ExecKinds& kinds) {
  if (kinds.searcher && kinds.trainer) return "searcher,trainer";
  if (kinds.searcher) return "searcher";
  if (kinds.trainer) return "trainer";
  return "";
}

}  // namespace hippo::protocol
