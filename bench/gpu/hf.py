"""The peer side of the GPU kit: HF transformers' BERT in PyTorch, at its best on a GPU.

    python bench/gpu/hf.py GROUP... --mode gpu|cpu --out DIR --work DIR --deadline T

Training as its users run it fastest: bfloat16 autocast, SDPA attention (flash /
memory-efficient kernels), `torch.compile` on the model, fused AdamW with the same
weight-decay exclusions (a constant rate: a schedule costs nothing measurable),
global-norm clipping at 1.0; labels
as HF takes them (-100 where no prediction is made). Inference: bfloat16 weights, SDPA,
`torch.inference_mode()`, each batch padded to its longest text (what the pipeline does).
The CPU mode skips `torch.compile` (minutes of compiling on 2 cores for a tiny model).

The parity group writes the checkpoint both sides load (WORK/hf_checkpoint, seeded) and
HF's logits on cases.parity_inputs().
"""

import gc
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

import cases  # noqa: E402


def device():
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def device_name():
    return torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"


def sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def config(model_name, **extra):
    return transformers.BertConfig(**cases.config_dict(model_name), attn_implementation="sdpa",
                                   **extra)


def to_torch(batch):
    return {k: torch.from_numpy(np.asarray(v)).to(device()) for k, v in batch.items()}


def hf_inputs(x):
    return {"input_ids": x["token_ids"].long(), "token_type_ids": x["segment_ids"].long(),
            "attention_mask": x["padding_mask"].long()}


def optimizer(model):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if "LayerNorm" in name or name.endswith("bias") else decay).append(p)
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=1e-4, eps=1e-6, fused=torch.cuda.is_available())


def timed_steps(step, warmup_steps, timed_steps):
    start = time.perf_counter()
    for _ in range(warmup_steps):
        loss = step()
    sync()
    warm = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(timed_steps):
        loss = step()
    loss = float(loss)  # waits for the last step
    seconds = (time.perf_counter() - start) / timed_steps
    if not np.isfinite(loss):
        raise FloatingPointError(f"loss is {loss}")
    return warm, seconds, loss


def training_step(model, inputs, compile_model):
    opt = optimizer(model)
    forward = torch.compile(model) if compile_model else model
    autocast = torch.autocast(device().type, dtype=torch.bfloat16)

    def step():
        with autocast:
            loss = forward(**inputs).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()
    return step


def release():
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    torch._dynamo.reset()


def parity(plan, work_dir, results):
    torch.manual_seed(cases.SEED)
    model = transformers.BertForPreTraining(config(plan["parity_model"])).eval()
    model.save_pretrained(os.path.join(work_dir, "hf_checkpoint"))
    model.to(device())
    x = to_torch(cases.parity_inputs())
    positions = x["masked_lm_positions"].long()
    found = {}
    with torch.inference_mode():
        for dtype, autocast in (("float32", False), ("mixed_bfloat16", True)):
            with torch.autocast(device().type, dtype=torch.bfloat16, enabled=autocast):
                out = model(**hf_inputs(x))
            mlm = torch.gather(out.prediction_logits, 1, positions[..., None].expand(
                -1, -1, out.prediction_logits.shape[-1]))
            found[f"mlm_{dtype}"] = mlm.float().cpu().numpy()
            found[f"nsp_{dtype}"] = out.seq_relationship_logits.float().cpu().numpy()
    np.savez(os.path.join(work_dir, "parity_hf.npz"), **found)
    results.add(group="parity", model=plan["parity_model"], device=device_name())


def pretrain(plan, results, deadline, compile_model):
    for model_name, seq, predictions, batches in plan["pretrain"]:
        for batch_size in batches:
            if cases.out_of_time(plan, deadline, 60, results, group="pretrain",
                                 model=model_name, seq=seq):
                return
            data = cases.pretraining_batch(batch_size, seq, predictions)
            labels = np.full(data["token_ids"].shape, -100, "int64")
            np.put_along_axis(labels, data["masked_lm_positions"], data["masked_lm_ids"], 1)
            inputs = hf_inputs(to_torch({k: data[k] for k in
                                         ("token_ids", "segment_ids", "padding_mask")}))
            inputs["labels"] = torch.from_numpy(labels).to(device())
            inputs["next_sentence_label"] = torch.from_numpy(
                data["next_sentence_labels"].astype("int64")).to(device())
            model = transformers.BertForPreTraining(
                config(model_name)).to(device()).train()
            try:
                warm, seconds, loss = timed_steps(
                    training_step(model, inputs, compile_model), plan["warmup_steps"],
                    plan["timed_steps"])
            except torch.cuda.OutOfMemoryError:
                del model, inputs
                release()
                results.add(group="pretrain", model=model_name, seq=seq, batch=batch_size,
                            out_of_memory=True)
                continue
            del model, inputs
            release()
            results.add(group="pretrain", model=model_name, seq=seq, batch=batch_size,
                        predictions=predictions, step_s=seconds, warmup_s=warm, loss=loss,
                        flops=cases.train_flops(model_name, batch_size, seq, predictions))
            break


def finetune(plan, results, deadline, compile_model):
    for model_name, seq, batch_size in plan["finetune"]:
        if cases.out_of_time(plan, deadline, 45, results, group="finetune",
                             model=model_name, seq=seq):
            return
        x, y = cases.classification_batch(batch_size, seq)
        inputs = hf_inputs(to_torch(x))
        inputs["labels"] = torch.from_numpy(y.astype("int64")).to(device())
        model = transformers.BertForSequenceClassification(
            config(model_name, num_labels=2)).to(device()).train()
        warm, seconds, loss = timed_steps(training_step(model, inputs, compile_model),
                                          plan["warmup_steps"], 3 * plan["timed_steps"])
        del model, inputs
        release()
        results.add(group="finetune", model=model_name, seq=seq, batch=batch_size,
                    step_s=seconds, warmup_s=warm, loss=loss,
                    flops=cases.train_flops(model_name, batch_size, seq))


def inference(plan, work_dir, results, deadline):
    for model_name, batch_sizes in plan["inference"]:
        model = transformers.BertForSequenceClassification(
            config(model_name, num_labels=2))
        model = model.to(device(), torch.bfloat16).eval()
        for batch_size in batch_sizes:
            if cases.out_of_time(plan, deadline, 30, results, group="inference",
                                 model=model_name, batch=batch_size):
                return
            texts = cases.real_texts(plan["inference_texts"][batch_size], work_dir)
            batches = [hf_inputs(to_torch(b)) for b in cases.padded_batches(texts, batch_size)]
            with torch.inference_mode():
                start = time.perf_counter()
                for b in batches:
                    model(**b).logits.float().cpu()
                warm = time.perf_counter() - start
                start = time.perf_counter()
                for b in batches:
                    logits = model(**b).logits.float().cpu()
                seconds = time.perf_counter() - start
            if not torch.isfinite(logits).all():
                raise FloatingPointError("non-finite logits")
            results.add(group="inference", model=model_name, batch=batch_size,
                        texts=len(texts), seconds=seconds, warmup_s=warm,
                        tokens=int(sum(len(t) for t in texts)))
        del model
        release()


def main():
    args = cases.worker_args(__doc__, ["parity", "pretrain", "finetune", "inference"])
    plan = cases.PLANS[args.mode]
    results = cases.Results(args.out, "hf")
    compile_model = args.mode == "gpu"
    for group in args.groups:
        if group == "parity":
            results.add(group="env", device=device_name(), torch=torch.__version__,
                        transformers=transformers.__version__,
                        cuda=torch.version.cuda if torch.cuda.is_available() else None)
            parity(plan, args.work, results)
        elif group == "pretrain":
            pretrain(plan, results, args.deadline, compile_model)
        elif group == "finetune":
            finetune(plan, results, args.deadline, compile_model)
        else:
            inference(plan, args.work, results, args.deadline)


if __name__ == "__main__":
    main()
