"""Ablation (issue 12, recipe item 3): the copied layers attend to the *target's* keys/values at verified positions.

Today the drafter's copied layers attend to their own keys/values, which a catch-up pass computes from the
fused input `(h_{p-1}, x_p)` at every verified position. The variant reads the target's own keys/values of the
copied layers there instead (exact context, position 0 included, and no catch-up pass at inference) and keeps
only speculative positions in its own cache. This script measures whether that drafts better, on held-out
self-distillation records, by fine-tuning the shipped drafter both ways for the same steps:

    python scripts/ablation_target_kv.py features --train 256 --eval 48 --out runs/kv_ablation/feats.pt
    python scripts/ablation_target_kv.py train --arm own --feats runs/kv_ablation/feats.pt --steps 120
    python scripts/ablation_target_kv.py train --arm target --feats runs/kv_ablation/feats.pt --steps 120
    python scripts/ablation_target_kv.py check --feats runs/kv_ablation/feats.pt   # rollout == step-by-step drafting

Each `train` prints held-out agreement by step, P(first j accepted) and tau before and after (5-step drafts from
true states, as `oneiro-train` evaluates). The variant lives only here: the library keeps the own-context design
unless this wins (docs/training.md reports the result).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch
from transformers import DynamicCache

import oneiro_hf.training.trainer as trainer_mod
from oneiro_hf.kv_cache import DrafterKVCache
from oneiro_hf.loading import load_target_and_drafter
from oneiro_hf.modeling_oneiro import OneiroDrafter
from oneiro_hf.training import features as feat
from oneiro_hf.training.records import load_records
from oneiro_hf.training.ridge import fit_fuse_ridge
from oneiro_hf.training.rollout import _RolloutCache, parallel_rollout, rollout_mask

DATA = "data/selfdistill/smollm2-135m-instruct"


class _ContextCache(_RolloutCache):
    """The rollout cache with the verified context's keys/values (positions 0..T-1) in front of the drafter's own.

    context: {layer_idx: (keys, values)} or a callable layer_idx -> (keys, values), each (B, kv_heads, T, d)."""

    def __init__(self, context) -> None:
        super().__init__()
        self.context = context

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        ks, vs = super().update(key_states, value_states, layer_idx)
        ck, cv = self.context(layer_idx) if callable(self.context) else self.context[layer_idx]
        return torch.cat([ck.to(ks.dtype), ks], dim=2), torch.cat([cv.to(vs.dtype), vs], dim=2)


def own_projection_context(drafter, layer_inputs: dict[int, torch.Tensor]):
    """Arm "exact": the drafter's own key/value projections (with grad) over the target's true inputs of the copied
    layers at positions 0..T-1 (llama attention: input norm, k/v projections, RoPE on keys)."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    start = drafter.config.interval[0]

    def context(layer_idx: int):
        layer = drafter.layers[layer_idx - start]
        x = layer.input_layernorm(layer_inputs[layer_idx].to(drafter.fuse.weight.dtype))
        b, t, _ = x.shape
        attn = layer.self_attn
        k = attn.k_proj(x).view(b, t, -1, attn.head_dim).transpose(1, 2)
        v = attn.v_proj(x).view(b, t, -1, attn.head_dim).transpose(1, 2)
        positions = torch.arange(t, device=x.device).unsqueeze(0).expand(b, -1)
        cos, sin = next(iter(drafter.rotary_embeddings(x, positions).values()))  # one layer type (llama)
        k, _ = apply_rotary_pos_emb(k, k, cos, sin)
        return k, v

    return context


def context_mask(length: int, step: int, device: torch.device, first: int = 0) -> torch.Tensor:
    """(1, 1, Q, (length+1) + keys of `rollout_mask`): drafter index i is position i+1; the chain started at index
    s sees the target's keys at positions <= s (verified), its own step-1 key at index s, and its later steps."""
    first = first if step > 1 else 0
    rows = torch.arange(first, length, device=device).unsqueeze(1)
    start = rows - step + 1
    target_block = torch.arange(length + 1, device=device).unsqueeze(0) <= start
    own = rollout_mask(length, step, None, device, first)[0, 0]
    own[:, :length] = torch.arange(length, device=device).unsqueeze(0) == start
    return torch.cat([target_block, own], dim=1)[None, None]


def context_rollout(drafter, states, token_ids, position_ids, steps, first_index=0, context=None):
    """`parallel_rollout` with the target's keys/values as the verified context (no sliding windows)."""
    if context is None:
        return parallel_rollout(drafter, states, token_ids, position_ids, steps, first_index)
    bound = drafter.require_bound()
    emb = bound.embed_tokens(token_ids)
    length = token_ids.shape[1]
    first = min(max(int(first_index), 0), length - 1)
    cache = _ContextCache(context)
    rotary = drafter.rotary_embeddings(emb, position_ids)
    suffix_rotary = {t: tuple(r[:, first:] for r in cs) for t, cs in rotary.items()}
    outputs = []
    for k in range(1, steps + 1):
        if k == 1:
            current, tok, pos, rot = states, emb, position_ids, rotary
        else:
            prev = outputs[-1][:, first:]
            current = torch.cat([states[:, first : first + 1], drafter.recurrent_inputs(prev[:, :-1])], dim=1)
            tok, pos, rot = emb[:, first:], position_ids[:, first:], suffix_rotary
        mask = context_mask(length, k, emb.device, first)
        x = drafter.run_layers(drafter.fuse_inputs(current, tok), rot, pos, lambda w, m=mask: m, cache)
        if k > 1 and first > 0:
            x = torch.cat([x.new_zeros(x.shape[0], first, x.shape[2]), x], dim=1)
        outputs.append(x)
    return outputs


# ------------------------------------------------------------------------------------------------ features
def compute_features(args) -> None:
    model, _, drafter = load_target_and_drafter("smollm2-135m-instruct", None)
    records = load_records(DATA)
    train, held = feat.split_records(records, 0.05, 0)
    print(f"{len(records)} records: {len(train)} train, {len(held)} held out (the shipped drafter's split)")
    start, end = drafter.config.interval
    out = {"train": [], "eval": []}
    t0, tokens = time.perf_counter(), 0
    for name, recs, n in (("eval", held, args.eval), ("train", train, args.train)):
        for rec in recs[:n]:
            seq = feat.make_sequence(rec, args.max_len)
            if seq is None:
                continue
            ids, prompt_len = seq
            x = torch.tensor([ids])
            with torch.no_grad():
                cache = DynamicCache()
                o = model.model(
                    input_ids=x,
                    use_cache=True,
                    past_key_values=cache,
                    output_hidden_states=sorted({*range(start, end), *drafter.input_layers}),
                )
                states = o.last_hidden_state
                argmax = model.lm_head(states[0]).argmax(-1)
            argmax[: max(prompt_len - 1, 0)] = feat.IGNORE
            kv = torch.stack(
                [torch.stack([cache.layers[l].keys[0], cache.layers[l].values[0]]) for l in range(start, end)]
            )
            out[name].append(
                {
                    "input_ids": x[0],
                    "prompt_len": prompt_len,
                    "states": states[0].half(),
                    "inputs": drafter.input_states(o.hidden_states)[0].half(),
                    "target_argmax": argmax,
                    "resid": o.hidden_states[start][0].half(),
                    "kv": kv.half(),
                    # inputs of the copied layers (arm "exact": the drafter's projections over them)
                    "layer_inputs": torch.stack([o.hidden_states[l][0] for l in range(start, end)]).half(),
                }
            )  # kv: (layers, 2, heads, T, d)
            tokens += len(ids)
        print(
            f"{name}: {len(out[name])} sequences, {tokens} tokens so far, "
            f"{tokens / (time.perf_counter() - t0):.0f} tokens/s",
            flush=True,
        )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    torch.save(out, args.out)


def batches(items, size, interval):
    for s in range(0, len(items), size):
        group = items[s : s + size]
        batch = feat.collate(group)
        width = batch["input_ids"].shape[1]
        kv = torch.zeros((len(group),) + group[0]["kv"].shape[:-2] + (width, group[0]["kv"].shape[-1]))
        for row, it in enumerate(group):
            kv[row, ..., : it["kv"].shape[-2], :] = it["kv"].float()
        if "resid" in group[0]:  # the input of layer `start`, for the ridge fit
            batch["resid"] = torch.zeros(batch["states"].shape, dtype=torch.float32)
            for row, it in enumerate(group):
                batch["resid"][row, : it["resid"].shape[0]] = it["resid"].float()
        layer_inputs = torch.zeros(
            (len(group), group[0]["layer_inputs"].shape[0], width, batch["states"].shape[-1])
        )
        for row, it in enumerate(group):
            layer_inputs[row, :, : it["layer_inputs"].shape[1]] = it["layer_inputs"].float()
        batch["context"] = {
            "kv": {l: (kv[:, i, 0], kv[:, i, 1]) for i, l in enumerate(range(*interval))},
            "layer_inputs": {l: layer_inputs[:, i] for i, l in enumerate(range(*interval))},
        }
        yield batch


class _Arm:
    """Routes the trainer's rollouts through `context_rollout` with the current batch's verified context: none
    ("own": the drafter's own teacher-forced keys, as shipped), the target's keys/values ("target"), or the drafter's
    projections over the target's true layer inputs ("exact")."""

    def __init__(self, arm: str) -> None:
        self.arm = arm
        self.context = None

    def __call__(self, drafter, states, token_ids, position_ids, steps, first_index=0):
        n = token_ids.shape[1] + 1  # target positions 0..n-1
        if self.arm == "own":
            ctx = None
        elif self.arm == "target":
            ctx = {l: (k[:, :, :n], v[:, :, :n]) for l, (k, v) in self.context["kv"].items()}
        else:
            ctx = own_projection_context(
                drafter, {l: x[:, :n] for l, x in self.context["layer_inputs"].items()}
            )
        return context_rollout(drafter, states, token_ids, position_ids, steps, first_index, ctx)


def evaluate(drafter, items, arm, interval, steps=5):
    sums = None
    for batch in batches(items, 4, interval):
        arm.context = batch.pop("context")
        s = trainer_mod.rollout_eval_sums(drafter, [batch], steps)
        sums = s if sums is None else sums + s
    m = trainer_mod.metrics_from_sums(sums)
    return {
        "agree": [round(m[f"eval_agree_step{k}"], 4) for k in range(1, steps + 1)],
        "accept": [round(m[f"eval_accept_{k}"], 4) for k in range(1, steps + 1)],
        "tau": round(m["eval_tau"], 4),
    }


def train(args) -> None:
    torch.manual_seed(args.seed)
    model, _, drafter = load_target_and_drafter("smollm2-135m-instruct", None)
    data = torch.load(args.feats)
    interval = tuple(drafter.config.interval)
    # "ridge": a fresh drafter of the shipped shape, its fusion fitted in closed form (identical for every arm)
    if args.init == "ridge":
        drafter = OneiroDrafter.from_target(
            model,
            interval=interval,
            draft_vocab_ids=drafter.draft_vocab_ids,
            input_layers=drafter.config.input_layers,
        )
        ridge = fit_fuse_ridge(drafter, (b for b in batches(data["train"], 4, interval)))
        print("ridge", {k: v for k, v in ridge.items() if not isinstance(v, (list, dict))}, flush=True)
    arm = _Arm(args.arm)
    trainer_mod.parallel_rollout = arm  # DrafterTrainModule and rollout_eval_sums call it by this name
    drafter = drafter.float()
    for p in drafter.parameters():
        p.requires_grad_(False)
    trainable = [p for n, p in drafter.named_parameters() if n.startswith(("fuse", "layers"))]
    for p in trainable:
        p.requires_grad_(True)
    states = torch.cat([it["states"].float()[it["prompt_len"] :] for it in data["train"]])
    module = trainer_mod.DrafterTrainModule(
        drafter, states.mean(0), states.std(0).clamp_min(1e-4), [1, 0.8, 0.6, 0.5]
    )
    report = {
        "arm": args.arm,
        "init": args.init,
        "steps": args.steps,
        "lr": args.lr,
        "batch": args.batch,
        "train_sequences": len(data["train"]),
        "eval_sequences": len(data["eval"]),
        "before": evaluate(drafter, data["eval"], arm, interval),
    }
    print("before", report["before"], flush=True)
    opt = torch.optim.AdamW(trainable, lr=args.lr, weight_decay=0.0)
    order = list(range(len(data["train"])))
    g = torch.Generator().manual_seed(args.seed)
    t0 = time.perf_counter()
    step = 0
    while step < args.steps:
        perm = [order[i] for i in torch.randperm(len(order), generator=g)]
        for s in range(0, len(perm) - args.batch + 1, args.batch):
            if step >= args.steps:
                break
            batch = next(batches([data["train"][i] for i in perm[s : s + args.batch]], args.batch, interval))
            arm.context = batch.pop("context")
            lr = args.lr * 0.5 * (1 + math.cos(math.pi * step / args.steps))
            for group in opt.param_groups:
                group["lr"] = lr
            out = module(
                batch["input_ids"],
                batch["attention_mask"],
                batch["prompt_lens"],
                batch["states"].float(),
                batch["target_argmax"],
                rollout_steps=4,
                inputs=batch["inputs"].float(),
            )
            opt.zero_grad()
            out["loss"].backward()
            torch.nn.utils.clip_grad_norm_(trainable, 1.0)
            opt.step()
            step += 1
            if step % 10 == 0:
                agree = (out["stats"][:, 0] / out["stats"][:, 1].clamp_min(1)).tolist()
                print(
                    f"step {step} loss {float(out['loss']):.4f} agree {[round(a, 3) for a in agree]} "
                    f"{time.perf_counter() - t0:.0f}s",
                    flush=True,
                )
    report["after"] = evaluate(drafter, data["eval"], arm, interval)
    report["train_seconds"] = round(time.perf_counter() - t0, 1)
    print("after", report["after"], flush=True)
    Path(args.report).parent.mkdir(parents=True, exist_ok=True)
    Path(args.report).write_text(json.dumps(report, indent=1))


def check(args) -> None:
    """The rollout with a verified context equals drafting step by step over a cache holding that context, for both
    variants; and a fresh drafter's projections over the true layer inputs give the target's own keys/values."""
    model, _, drafter = load_target_and_drafter("smollm2-135m-instruct", None)
    drafter = drafter.float()
    it = torch.load(args.feats)["eval"][0]
    interval = tuple(drafter.config.interval)
    ids, inputs = it["input_ids"][None], it["inputs"].float()[None]
    layer_inputs = {l: it["layer_inputs"][i].float()[None] for i, l in enumerate(range(*interval))}
    fresh = OneiroDrafter.from_target(model, interval=interval, input_layers=drafter.config.input_layers)
    with torch.no_grad():
        fn = own_projection_context(fresh, layer_inputs)
        gap = max(
            float((fn(l)[j] - it["kv"][i, j].float()[None]).abs().max())
            for i, l in enumerate(range(*interval))
            for j in (0, 1)
        )
    print(f"fresh drafter's projections vs the target's keys/values: max |diff| = {gap:.2e} (fp16 features)")
    assert gap < 0.05, gap
    if args.arm == "target":
        ctx = {
            l: (it["kv"][i, 0].float()[None], it["kv"][i, 1].float()[None])
            for i, l in enumerate(range(*interval))
        }
    else:
        with torch.no_grad():
            fn = own_projection_context(drafter, layer_inputs)
            ctx = {l: fn(l) for l in range(*interval)}
    t = ids.shape[1]
    positions = torch.arange(1, t).unsqueeze(0)
    with torch.no_grad():
        outs = context_rollout(drafter, inputs[:, :-1], ids[:, 1:], positions, 3, 0, ctx)
        worst = 0.0
        for s in (0, 5, t // 2, t - 5):  # chain started at index s (position s+1)
            cache = DrafterKVCache()
            for l in range(*interval):
                cache.update(ctx[l][0][:, :, : s + 1], ctx[l][1][:, :, : s + 1], l)
            cache.commit()
            x_state, x_tok = inputs[:, s : s + 1], ids[:, s + 1 : s + 2]
            for k in range(3):
                if s + k >= t - 1:
                    break
                st = drafter.transition(x_state, x_tok, torch.tensor([[s + 1 + k]]), cache)
                worst = max(worst, float((st[0, 0] - outs[k][0, s + k]).abs().max()))
                x_state, x_tok = drafter.recurrent_inputs(st), ids[:, s + k + 2 : s + k + 3]
    print(f"max |rollout - step-by-step| = {worst:.2e}")
    assert worst < 1e-3, worst


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("features")
    f.add_argument("--train", type=int, default=256)
    f.add_argument("--eval", type=int, default=48)
    f.add_argument("--max-len", type=int, default=512)
    f.add_argument("--out", default="runs/kv_ablation/feats.pt")
    t = sub.add_parser("train")
    t.add_argument("--arm", choices=["own", "target", "exact"], required=True)
    t.add_argument("--feats", default="runs/kv_ablation/feats.pt")
    t.add_argument("--steps", type=int, default=120)
    t.add_argument("--batch", type=int, default=4)
    t.add_argument("--lr", type=float, default=1e-4)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument(
        "--init",
        choices=["shipped", "ridge"],
        default="shipped",
        help="fine-tune the shipped drafter, or train a fresh one from the ridge fit",
    )
    t.add_argument("--report", default=None)
    c = sub.add_parser("check")
    c.add_argument("--feats", default="runs/kv_ablation/feats.pt")
    c.add_argument("--arm", choices=["target", "exact"], default="target")
    args = p.parse_args()
    if args.cmd == "train" and args.report is None:
        args.report = f"runs/kv_ablation/{args.init}_{args.arm}.json"
    {"features": compute_features, "train": train, "check": check}[args.cmd](args)


if __name__ == "__main__":
    main()
