#include "worker/engine/text_data.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>

#include "worker/engine/bpe.h"

namespace hippo::worker {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot read: " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw std::runtime_error(path + ": cannot read: " + std::strerror(errno));
  return text.str();
}

std::shared_ptr<const TextCorpus> read_corpus(const std::string& dir) {
  auto corpus = std::make_shared<TextCorpus>();
  int64_t fortune = 0;  // non-empty fortunes so far, over all files
  std::vector<int32_t> current;
  auto finish_fortune = [&] {
    if (current.empty()) return;
    std::vector<int32_t>& split = fortune % 10 == 9 ? corpus->eval : corpus->train;
    split.insert(split.end(), current.begin(), current.end());
    split.push_back(text_token('%'));
    split.push_back(text_token('\n'));
    current.clear();
    ++fortune;
  };
  for (const char* name : kFortunesFiles) {
    const std::string path = dir + "/" + name;
    const std::string text = read_file(path);
    size_t start = 0;
    while (start < text.size()) {
      size_t end = text.find('\n', start);
      if (end == std::string::npos) end = text.size();
      const std::string_view line(text.data() + start, end - start);
      if (line == "%") {
        finish_fortune();
      } else {
        for (unsigned char byte : line)
          if (int32_t t = text_token(byte); t >= 0) current.push_back(t);
        current.push_back(text_token('\n'));
      }
      start = end + 1;
    }
    finish_fortune();  // a file's last fortune, when no "%" line follows it
  }
  if (std::ssize(corpus->train) != kFortunesTrainTokens ||
      std::ssize(corpus->eval) != kFortunesEvalTokens)
    throw std::runtime_error(
        dir + ": the fortunes corpus has " + std::to_string(corpus->train.size()) +
        " training and " + std::to_string(corpus->eval.size()) + " evaluation tokens, expected " +
        std::to_string(kFortunesTrainTokens) + " and " + std::to_string(kFortunesEvalTokens) +
        " (Debian's fortunes 1:1.99.1; another version changes the data)");
  return corpus;
}

// The characters' text of each split, encoded by the tokenizer.
std::shared_ptr<const TextCorpus> encode_corpus(const TextCorpus& characters,
                                                const std::string& name, const std::string& dir) {
  const Bpe& bpe = tokenizer(name);
  auto corpus = std::make_shared<TextCorpus>();
  corpus->vocab = bpe.vocab();
  auto encode = [&](const std::vector<int32_t>& tokens) {
    std::string text;
    for (int32_t t : tokens) text += token_char(t);
    return bpe.encode(text);
  };
  corpus->train = encode(characters.train);
  corpus->eval = encode(characters.eval);
  if (std::ssize(corpus->train) != kFortunesBpe32kTrainTokens ||
      std::ssize(corpus->eval) != kFortunesBpe32kEvalTokens)
    throw std::runtime_error(dir + ": the fortunes corpus has " +
                             std::to_string(corpus->train.size()) + " training and " +
                             std::to_string(corpus->eval.size()) + " evaluation " + name +
                             " tokens, expected " + std::to_string(kFortunesBpe32kTrainTokens) +
                             " and " + std::to_string(kFortunesBpe32kEvalTokens));
  return corpus;
}

}  // namespace

int32_t text_token(unsigned char byte) {
  if (byte == '\n') return 0;
  if (byte == '\t') return ' ' - 31;
  if (byte >= 32 && byte <= 126) return byte - 31;
  return -1;
}

char token_char(int32_t token) {
  return token == 0 ? '\n' : static_cast<char>(token + 31);
}

std::shared_ptr<const TextCorpus> load_fortunes(const std::string& dir,
                                                const std::string& tokenizer) {
  static std::mutex mu;
  static std::map<std::pair<std::string, std::string>, std::shared_ptr<const TextCorpus>> cache;
  std::lock_guard<std::mutex> lock(mu);
  std::shared_ptr<const TextCorpus>& characters = cache[{dir, ""}];
  if (!characters) characters = read_corpus(dir);
  if (tokenizer.empty()) return characters;
  std::shared_ptr<const TextCorpus>& slot = cache[{dir, tokenizer}];
  if (!slot) slot = encode_corpus(*characters, tokenizer, dir);
  return slot;
}

void fill_windows(const std::vector<int32_t>& tokens, int context, const int32_t* samples,
                  int batch, int32_t* inputs, int32_t* targets) {
  const int64_t count = text_samples(std::ssize(tokens), context);
  for (int b = 0; b < batch; ++b) {
    if (samples[b] < 0 || samples[b] >= count)
      throw std::invalid_argument("text sample " + std::to_string(samples[b]) + " is outside [0, " +
                                  std::to_string(count) + ")");
    const int32_t* window = tokens.data() + int64_t{samples[b]} * context;
    std::copy(window, window + context, inputs + int64_t{b} * context);
    std::copy(window + 1, window + context + 1, targets + int64_t{b} * context);
  }
}

}  // namespace hippo::worker
