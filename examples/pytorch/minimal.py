import gzip
import torch
from torch import nn
import hippo


def fashion_mnist(split, n):  # the first n images (standardized) and labels of a split
    path = f"/usr/share/datasets/fashion-mnist/{split}-%s-idx%d-ubyte.gz"
    with gzip.open(path % ("images", 3)) as f, gzip.open(path % ("labels", 1)) as g:
        x = torch.frombuffer(bytearray(f.read(16 + 784 * n)[16:]), dtype=torch.uint8)
        y = torch.frombuffer(bytearray(g.read(8 + n)[8:]), dtype=torch.uint8)
    return (x.float().view(n, 784) / 255 - 0.286) / 0.353, y.long()


def train(stage):  # one stage: steps [stage.start, stage.end) of a trial's path
    hippo.deterministic()
    x, y = (t.to(stage.device) for t in fashion_mnist("train", stage.data["train_samples"]))
    x_eval, y_eval = (t.to(stage.device) for t in fashion_mnist("t10k", stage.data["eval_samples"]))
    torch.manual_seed(stage.seed)
    model = nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10)).to(stage.device)
    opt = torch.optim.SGD(model.parameters(), lr=0.0, momentum=stage.fixed["momentum"])
    state = hippo.torch_state(model=model, optimizer=opt)
    stage.restore(state.load)  # the parent stage's state (nothing to load at step 0)
    batch = hippo.BatchSampler(len(x), stage.fixed["batch_size"], stage.seed)
    def evaluate():
        with torch.no_grad():
            logits = model(x_eval)
        return {"accuracy": (logits.argmax(1) == y_eval).float().mean().item()}
    for step in stage.steps(evaluate=evaluate, save=state.save):
        opt.param_groups[0]["lr"] = stage.value("lr", step)
        opt.zero_grad()
        nn.functional.cross_entropy(model(x[batch(step)]), y[batch(step)]).backward()
        opt.step()


hippo.serve(train)
