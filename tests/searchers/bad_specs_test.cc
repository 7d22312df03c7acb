// The corpus of malformed specs: every file in bad_specs/ must be refused with a SpecError that
// starts with the expected JSON path and mentions the expected problem.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>

#include "searchers/spec.h"

namespace hippo {
namespace {

// file -> expected start of the message (path and the beginning of what is wrong).
const std::map<std::string, std::string> kExpected = {
    {"01-not-json.json", "$: not valid JSON"},
    {"02-truncated.json", "$: not valid JSON"},
    {"03-deep-nesting.json", "$: nested deeper than 32 levels"},
    {"04-root-not-object.json", "$: expected an object"},
    {"05-unknown-root-field.json", "trials: unknown field"},
    {"06-missing-name.json", "name: missing"},
    {"07-empty-name.json", "name: expected a non-empty name"},
    {"08-unknown-model-type.json", "model.type: unknown model type \"rnn\""},
    {"09-model-gpt.json", "model.heads: missing"},
    {"10-mlp-empty-hidden.json", "model.hidden: expected at least 1 element"},
    {"11-mlp-negative-width.json", "model.hidden[1]: expected an integer in [1, 1048576], got -1"},
    {"12-cnn-missing-fc.json", "model.fc: missing"},
    {"13-external-empty-command.json", "model.command: expected at least 1 element"},
    {"14-model-unknown-field.json", "model.dropout: unknown field"},
    {"15-unknown-data-set.json", "data.name: unknown data set \"mnist\""},
    {"16-train-samples-too-many.json", "data.train_samples: expected an integer in [1, 60000]"},
    {"17-eval-samples-zero.json", "data.eval_samples: expected an integer in [1, 10000]"},
    {"18-negative-seed.json", "seed: expected an integer in [0, "},
    {"19-fractional-seed.json", "seed: expected an integer, got 1.5"},
    {"20-unknown-setting.json", "fixed.learning_rate: unknown setting \"learning_rate\""},
    {"21-zero-batch-size.json", "fixed.batch_size: expected an integer in [1, 1048576], got 0"},
    {"22-unknown-optimizer.json", "fixed.optimizer: expected one of \"sgd\", \"adam\", \"adamw\""},
    {"23-momentum-out-of-range.json", "fixed.momentum: expected a number in [0, 1], got 1.5"},
    {"24-distribution-in-fixed.json", "fixed.momentum: expected a number (schedules"},
    {"25-gamma-string.json",
     "hyperparameters.lr.gamma: expected a number or a distribution, got \"x\""},
    {"26-empty-grid.json", "hyperparameters.lr.init.grid: expected at least 1 element"},
    {"27-empty-choice.json", "hyperparameters.weight_decay.choice: expected at least 1 element"},
    {"28-reversed-uniform.json", "hyperparameters.beta1.uniform: expected lo < hi"},
    {"29-degenerate-uniform.json", "hyperparameters.beta1.uniform: expected lo < hi"},
    {"30-loguniform-from-zero.json", "hyperparameters.lr.init.loguniform: loguniform needs lo > 0"},
    {"31-unknown-distribution.json", "hyperparameters.weight_decay: expected a number, a"},
    {"32-unknown-schedule.json", "hyperparameters.lr.schedule: unknown schedule \"linear_decay\""},
    {"33-fractional-milestone.json", "hyperparameters.lr.milestones[0]: expected an integer"},
    {"34-no-milestones.json", "hyperparameters.lr.milestones: expected at least 1 element"},
    {"35-points-not-from-zero.json",
     "hyperparameters.lr.points[0][0]: the first point must start at 0"},
    {"36-points-not-increasing.json",
     "hyperparameters.lr.points[2][0]: point starts must increase"},
    {"37-warmup-without-after.json", "hyperparameters.lr.after: missing"},
    {"38-unknown-unit.json", "hyperparameters.lr.unit: expected \"step\" or \"epoch\""},
    {"39-epochs-with-batch-schedule.json",
     "hyperparameters.lr.unit: epoch units are not possible here: batch_size varies"},
    {"40-negative-length.json", "length.steps: expected an integer in [1, "},
    {"41-missing-length.json", "length: missing"},
    {"42-length-steps-and-epochs.json", "length: expected {\"steps\": N} or {\"epochs\": E}"},
    {"43-unknown-eval-field.json", "eval.at: unknown field"},
    {"44-unknown-searcher-option.json", "searcher.eta: unknown field"},
    {"45-asha-without-min-length.json", "searcher.min_length: missing"},
    {"46-unknown-searcher.json", "searcher.name: unknown searcher \"bayes\""},
    {"47-missing-metric.json", "searcher.metric: missing"},
    {"48-bad-mode.json", "searcher.mode: expected \"max\" or \"min\""},
    {"49-random-without-max-trials.json", "searcher.max_trials: missing"},
    {"50-zero-max-trials.json", "searcher.max_trials: expected an integer in [1, "},
    {"51-betas-one-value.json", "fixed.betas: expected at least 2 elements"},
    {"52-betas-and-beta1.json", "fixed.betas: give either betas or beta1/beta2"},
    {"53-fixed-and-hyperparameter.json",
     "hyperparameters.weight_decay: \"weight_decay\" is also given under fixed"},
    {"54-schedule-of-text-setting.json", "hyperparameters.optimizer: \"optimizer\" is constant"},
    {"55-uniform-batch-size.json", "hyperparameters.batch_size: expected an int distribution"},
    {"56-batch-larger-than-data.json",
     "fixed.batch_size: a batch size of 128 is more than data.train_samples (100)"},
    {"57-missing-lr.json", "fixed: missing lr"},
    {"58-unknown-metric.json", "searcher.metric: expected \"accuracy\", \"loss\" or \"params\""},
    {"59-duplicate-grid-value.json", "hyperparameters.lr.init.grid[1]: duplicate value 0.1"},
    {"60-epochs-without-batch-size.json",
     "length.epochs: epoch units are not possible here: no batch_size"},
    {"61-grid-too-large.json", "searcher.max_trials: the grid has 2560000 points"},
    {"62-cosine-batch-size.json",
     "hyperparameters.batch_size.schedule: an integer setting takes constant, multistep or"},
    {"63-zero-cosine-length.json", "hyperparameters.lr.length: expected an integer in [1, "},
    {"64-after-not-a-schedule.json", "hyperparameters.lr.after: expected a schedule"},
    {"65-uniform-three-bounds.json", "hyperparameters.beta1.uniform: expected [lo, hi]"},
    {"66-zero-eval-interval.json", "eval.every.epochs: expected an integer in [1, "},
    {"67-string-in-number-grid.json", "hyperparameters.lr.init.grid[1]: expected a number"},
    {"68-negative-lr.json", "hyperparameters.lr.init: expected a number in [0, inf], got -0.1"},
    {"69-hyperparameters-not-object.json", "hyperparameters: expected an object"},
    {"70-invalid-utf8.json", "$: not valid JSON"},
    {"71-gpt-heads-do-not-divide-dim.json", "model.heads: 3 heads do not divide dim 64"},
    {"72-gpt-on-fashion-mnist.json",
     "data.name: model gpt reads \"fortunes\", not \"fashion-mnist\""},
    {"73-gpt-vocab-below-data.json",
     "model.vocab: the fortunes data has 96 tokens, more than a vocabulary of 64"},
    {"74-fortunes-train-samples-beyond-windows.json",
     "data.train_samples: expected an integer in [1, 18383], got 20000"},
    {"75-wsd-decay-past-length.json",
     "hyperparameters.lr.decay: the cooldown may end at step 80, after the study's length (70"},
    {"76-end-of-not-wsd.json",
     "length.end_of: \"lr\" is not a hyper-parameter with a wsd schedule"},
    {"77-end-of-unknown.json",
     "length.end_of: \"momentum\" is not a hyper-parameter with a wsd schedule (no such"},
    {"78-wsd-negative-warmup.json", "hyperparameters.lr.warmup: expected an integer in [0, "},
    {"79-wsd-decay-zero.json", "hyperparameters.lr.decay: expected an integer in [1, "},
    {"80-wsd-cooldown-before-warmup.json",
     "hyperparameters.lr.decay_start: the cooldown must not start before the warmup ends"},
    {"81-wsd-unknown-shape.json", "hyperparameters.lr.shape: expected one of \"linear\""},
    {"82-eval-at-end-false.json", "eval.at_end: the end of every trial is always evaluated"},
    {"83-end-of-with-sha.json", "searcher.name: sha ranks trials at common rung lengths"},
    {"84-model-leaf-bad-width.json",
     "model.hidden.grid[1][1]: expected an integer in [1, 1048576], got 0"},
    {"85-model-leaf-unknown-field.json", "model.width: unknown field"},
    {"86-model-leaf-uniform.json",
     "model.hidden: expected a value, or a grid, choice or int over the field's values"},
    {"87-model-leaf-int-over-list.json", "model.hidden.int[0]: expected a list, got 16"},
    {"88-model-leaf-duplicate.json", "model.hidden.grid[1]: duplicate value [16]"},
    {"89-model-leaf-gpt-context.json", "model.context: is one for the whole study"},
    {"90-model-leaves-heads-do-not-divide-dim.json",
     "model.heads.grid[1]: 3 heads do not divide dim 32 (with model.dim = 32)"},
    {"91-model-leaf-vocab-below-data.json",
     "model.vocab.choice[1]: the fortunes data has 96 tokens, more than a vocabulary of 64"},
    {"92-model-leaves-too-many-architectures.json", "model: more than 4096 architectures"},
    {"93-model-leaf-too-few-blocks-for-pipeline.json",
     "pipeline.stages: 4 pipeline positions (stages x chunks) for a gpt of 3 blocks (the "
     "embedding, model.layers transformer blocks, the head) (with model.layers = 1)"},
    {"94-model-leaf-with-gp.json", "model.hidden: gp searches uniform, loguniform and int leaves"},
    {"100-objective-without-mode.json", "searcher.objectives[1].mode: missing"},
    {"101-metric-and-objectives.json",
     "searcher.metric: give either metric and mode or objectives, not both"},
    {"102-constraint-without-bounds.json",
     "searcher.constraints[0]: expected min and/or max: a constraint needs a bound"},
    {"103-constraint-min-over-max.json", "searcher.constraints[0].min: is more than max (1)"},
    {"104-objective-repeated.json",
     "searcher.objectives[2].metric: \"accuracy\" is objective 0 already"},
    {"105-several-objectives-for-tpe.json",
     "searcher.objectives: searcher tpe optimizes one objective; with several use "},
    {"106-objective-unknown-metric.json",
     "searcher.objectives[1].metric: expected \"accuracy\", \"loss\" or \"params\" for a "
     "built-in model, got \"latency\""},
    {"107-objectives-empty.json", "searcher.objectives: expected at least 1 element"},
    {"108-constraint-unknown-field.json", "searcher.constraints[0].below: unknown field"},
    {"109-all-digit-name.json", "name: \"42\" reads as a study id"},
    {"110-id-as-name.json", "name: \"#7\" reads as a study id"},
    {"111-name-too-long.json", "name: a name of 300 bytes; a study's name has at most 256"},
    {"460-budget-steps-and-seconds.json", "budget: expected {\"steps\": N} or {\"wall_s\": T}"},
    {"461-unknown-sampler.json", "searcher.sampler.name: unknown sampler \"anneal\""},
    {"462-sampler-option-of-the-scheduler.json", "searcher.sampler.max_trials: unknown field"},
    {"463-percentile-out-of-range.json",
     "searcher.percentile: expected a number in [0, 100], got 150"},
    {"464-threshold-lower-above-upper.json", "searcher.threshold: lower is above upper"},
    {"465-grid-order-unknown.json", "searcher.order: expected \"grid\" or \"random\""},
    {"466-cmaes-grid-leaf.json",
     "hyperparameters.lr: cmaes searches uniform, loguniform and int leaves only"},
};

TEST(BadSpecs, EveryFileIsRefusedWithItsPath) {
  const std::filesystem::path dir = HIPPO_SOURCE_DIR "/tests/searchers/bad_specs";
  size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    SCOPED_TRACE(name);
    ++files;
    auto expected = kExpected.find(name);
    ASSERT_NE(expected, kExpected.end()) << "no expectation for " << name;
    try {
      load_spec(entry.path().string());
      ADD_FAILURE() << "accepted";
    } catch (const SpecError& e) {
      EXPECT_EQ(std::string(e.what()).rfind(expected->second, 0), 0u)
          << "got: " << e.what() << "\nwant prefix: " << expected->second;
    }
  }
  EXPECT_EQ(files, kExpected.size()) << "an expectation has no file";
  EXPECT_GE(files, 40u);
}

}  // namespace
}  // namespace hippo
