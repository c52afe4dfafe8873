"""The model, data and settings that examples/torch_gpt/train_torch.py (torch DistributedDataParallel
over gloo) and examples/torch_gpt/train.py (accord.torch) share, so that both train the same
thing: a small character-level GPT (accord-train's default shape: 2 layers, width 128, 4 heads,
context 64, bytes as tokens, tied head) on Debian's fortunes corpus, the last tenth held out.

Same --seed, same start: the initialisation and the order of the training windows follow the
seed, and both scripts read micro-batch k of worker `rank` of `workers` from stream positions
[(k * workers + rank) * micro_batch, +micro_batch), as accord hands them out.
"""
import faulthandler
import json
import math
import os
import signal

import torch
import torch.nn.functional as F

FORTUNES = "/usr/share/games/fortunes"  # Debian's fortunes package, accord-train's default corpus too


def add_arguments(parser):
    """The flags both scripts take (accord-train's names where it has the same setting)."""
    parser.add_argument("--steps", type=int, default=200, help="optimizer steps")
    parser.add_argument("--accumulation", type=int, default=2, help="micro-batches per worker and step")
    parser.add_argument("--micro-batch", type=int, default=8, help="windows of --context tokens per micro-batch")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--context", type=int, default=64)
    parser.add_argument("--learning-rate", type=float, default=3e-3, help="AdamW's peak rate (cosine to a tenth)")
    parser.add_argument("--warmup-steps", type=int, default=None,
                        help="linear warm-up of the learning rate (default: 5%% of --steps, at least 1; ACCO's "
                             "delayed rounds want it: docs/results/2026-12-07-acco-horizon.md)")
    parser.add_argument("--weight-decay", type=float, default=0.1)
    parser.add_argument("--max-gradient-norm", type=float, default=1.0, help="clip the mean gradient to this norm")
    parser.add_argument("--eval-interval", type=int, default=20, help="held-out loss every this many steps, and at the end")
    parser.add_argument("--eval-windows", type=int, default=128, help="held-out windows per evaluation")
    parser.add_argument("--seed", type=int, default=1, help="initialisation and data order")
    parser.add_argument("--data", default=FORTUNES, help="a directory of text files (every byte a token)")
    parser.add_argument("--metrics", default="", help="JSON lines, one per step, as accord-train --metrics writes")
    parser.add_argument("--count-sent", default="", metavar="FILE",
                        help="write the bytes this process sent on its links from its first micro-batch to the end "
                             "(JSON; for scripts/bench-netns, where each rank has a link of its own)")


def parse(parser):
    """The scripts' arguments, the warm-up's default made from --steps."""
    args = parser.parse_args()
    if args.warmup_steps is None:
        args.warmup_steps = max(1, args.steps // 20)
    return args


def check_arguments(parser, args):
    for name in ("steps", "accumulation", "micro_batch", "layers", "heads", "width", "context", "eval_interval",
                 "eval_windows"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} {getattr(args, name)}: must be at least 1")
    if args.width % args.heads:
        parser.error(f"--heads {args.heads} must divide --width {args.width}")
    if not os.path.isdir(args.data):
        parser.error(f"--data {args.data}: no such directory (Debian: apt-get install fortunes)")


def dump_stacks_on_signal():
    """SIGUSR1 writes every thread's Python stack to stderr, even while the GIL is held: how
    scripts/bench-netns asks a rank that stopped making progress where it is."""
    faulthandler.register(signal.SIGUSR1, all_threads=True)


def use_share_of_cores():
    """Each process takes its share of the cores (torchrun and bench-netns set LOCAL_WORLD_SIZE)."""
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(os.environ.get("LOCAL_WORLD_SIZE", "1"))))


def read_text(directory):
    """Every regular file directly in `directory` but fortune's `.dat` indexes and symlinks, in name
    order, as bytes; lines holding only `%` (fortune's separators) become empty lines."""
    parts = []
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if name.endswith(".dat") or os.path.islink(path) or not os.path.isfile(path):
            continue
        with open(path, "rb") as f:
            parts.append(b"\n".join(b"" if line == b"%" else line for line in f.read().split(b"\n")))
    if not parts:
        raise ValueError(f"{directory}: no text files")
    return b"".join(parts)


class Corpus:
    """The text as tokens (bytes), split into training (first nine tenths) and held-out data."""

    def __init__(self, directory, context, seed):
        tokens = torch.frombuffer(bytearray(read_text(directory)), dtype=torch.uint8).long()
        cut = len(tokens) * 9 // 10
        self.train, self.held_out, self.context = tokens[:cut], tokens[cut:], context
        # Stream position p reads the training window that starts at order[p % windows].
        self.order = torch.randperm(len(self.train) - context, generator=torch.Generator().manual_seed(seed))

    def windows(self, tokens, starts):
        """Inputs and next-token targets of the windows of `tokens` starting at `starts`."""
        index = starts.unsqueeze(1) + torch.arange(self.context + 1)
        chunk = tokens[index]
        return chunk[:, :-1], chunk[:, 1:]

    def micro_batch(self, first_position, examples):
        positions = torch.arange(first_position, first_position + examples) % len(self.order)
        return self.windows(self.train, self.order[positions])

    def evaluation_set(self, count):
        """The first `count` non-overlapping held-out windows (fewer if the split is shorter)."""
        count = min(count, (len(self.held_out) - 1) // self.context)
        return self.windows(self.held_out, torch.arange(count) * self.context)


class Block(torch.nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = torch.nn.LayerNorm(width), torch.nn.LayerNorm(width)
        self.qkv, self.projection = torch.nn.Linear(width, 3 * width), torch.nn.Linear(width, width)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(),
                                       torch.nn.Linear(4 * width, width))

    def forward(self, x):
        batch, length, width = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(batch, length, 3, self.heads, width // self.heads).unbind(2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # batch, head, position, head width
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        future = torch.ones(length, length, dtype=torch.bool).triu(1)
        attended = scores.masked_fill(future, float("-inf")).softmax(-1) @ v
        x = x + self.projection(attended.transpose(1, 2).reshape(batch, length, width))
        return x + self.mlp(self.norm2(x))


class GPT(torch.nn.Module):
    def __init__(self, vocab=256, context=64, layers=2, heads=4, width=128):
        super().__init__()
        self.token = torch.nn.Embedding(vocab, width)
        self.position = torch.nn.Embedding(context, width)
        self.blocks = torch.nn.Sequential(*[Block(width, heads) for _ in range(layers)])
        self.norm = torch.nn.LayerNorm(width)
        for name, p in self.named_parameters():  # GPT-2's initialisation
            if name.endswith("bias"):
                torch.nn.init.zeros_(p)
            elif p.dim() > 1:
                torch.nn.init.normal_(p, std=0.02)

    def forward(self, tokens):
        x = self.token(tokens) + self.position(torch.arange(tokens.shape[1]))
        return self.norm(self.blocks(x)) @ self.token.weight.t()  # the head is the token embedding


def model_of(args):
    """The model of these flags, initialised by --seed (the same on every rank and in both scripts)."""
    torch.manual_seed(args.seed)
    return GPT(context=args.context, layers=args.layers, heads=args.heads, width=args.width)


def loss_of(model, tokens, targets):
    logits = model(tokens)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def bytes_sent_on_links():
    """What this process's network namespace sent on its interfaces but loopback (/proc/net/dev)."""
    with open("/proc/self/net/dev") as f:
        rows = [line.split(":", 1) for line in f if ":" in line]
    return sum(int(counters.split()[8]) for name, counters in rows if name.strip() != "lo")


class SentCounter:
    """--count-sent: the bytes sent from the first micro-batch to the end of training, written as
    JSON; in bench-netns's namespaces the link is the rank's own, so both scripts are measured
    alike, headers included and start-up excluded."""

    def __init__(self, path):
        self.path, self.first = path, None

    def start(self):
        if self.path and self.first is None:
            self.first = bytes_sent_on_links()

    def write(self, steps):
        if self.path:
            with open(self.path, "w") as f:
                json.dump({"bytes": bytes_sent_on_links() - self.first, "steps": steps}, f)
