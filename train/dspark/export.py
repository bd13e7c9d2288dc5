"""Writes a trained drafter as a `dflash` GGUF (llama.cpp's DSpark format, docs/DSPARK.md) that
flint and llama.cpp both load: backbone hparams at the target's dimensions, `dflash.*` keys,
matrices in Q8_0 (or F16/F32), norms and the confidence head in F32, no `token_embd` / `output`
(both runtimes borrow the target's), and the target's whole tokenizer (llama.cpp loads a
vocabulary with every model and checks the drafter's against the target's).

    python3 export.py --model TARGET --ckpt work/ckpt.npz --out models/D.gguf [--type q8_0]
"""
import argparse

import numpy as np
from gguf import GGUFReader, GGUFWriter, GGMLQuantizationType, GGUFValueType
from gguf.quants import quantize

import target

QTYPES = {
    "q8_0": GGMLQuantizationType.Q8_0,
    "f16": GGMLQuantizationType.F16,
    "f32": GGMLQuantizationType.F32,
}


def mask_token_id(reader, n_vocab):
    """flint's rule (src/model/drafter_init.rs): the padding id when inside the vocabulary,
    else the last id."""
    f = reader.fields.get("tokenizer.ggml.padding_token_id")
    if f is not None and int(f.contents()) < n_vocab:
        return int(f.contents())
    return n_vocab - 1


def copy_tokenizer(w, reader):
    for key, f in reader.fields.items():
        if not key.startswith("tokenizer.") or key == "tokenizer.ggml.mask_token_id":
            continue
        vtype = f.types[0]
        if vtype == GGUFValueType.ARRAY:
            w.add_key_value(key, f.contents(), vtype, sub_type=f.types[-1])
        else:
            w.add_key_value(key, f.contents(), vtype)


def add_matrix(w, name, arr, qtype):
    """arr [out, in] float32 (GGUF ne = {in, out})."""
    arr = np.ascontiguousarray(arr, dtype=np.float32)
    if qtype == GGMLQuantizationType.F32:
        w.add_tensor(name, arr)
    elif qtype == GGMLQuantizationType.F16:
        w.add_tensor(name, arr.astype(np.float16))
    else:
        w.add_tensor(name, quantize(arr, qtype), raw_dtype=qtype)


def write(path, target_path, cfg, tensors, qtype, name):
    """tensors: GGUF name -> float32 array; matrices [out, in], vectors [n]."""
    reader = GGUFReader(target_path)
    hp = target.load_hparams(reader)
    w = GGUFWriter(path, "dflash")
    w.add_name(name)
    u32 = GGUFValueType.UINT32
    kv = {
        "block_count": cfg["layers"], "context_length": cfg["context_length"],
        "embedding_length": hp.d, "feed_forward_length": hp.ff,
        "attention.head_count": hp.n_head, "attention.head_count_kv": hp.n_kv,
        "attention.key_length": hp.hd, "attention.value_length": hp.hd,
        "rope.dimension_count": hp.hd, "vocab_size": hp.n_vocab,
        "block_size": cfg["block"], "target_hidden_size": hp.d,
    }
    for k, v in kv.items():
        w.add_key_value(f"dflash.{k}", int(v), u32)
    w.add_key_value("dflash.rope.freq_base", float(hp.rope_base), GGUFValueType.FLOAT32)
    w.add_key_value("dflash.attention.layer_norm_rms_epsilon", float(hp.eps),
                    GGUFValueType.FLOAT32)
    w.add_key_value("dflash.target_layers", [int(t) for t in cfg["taps"]],
                    GGUFValueType.ARRAY, sub_type=GGUFValueType.INT32)
    w.add_key_value("dflash.sample_from_anchor", True, GGUFValueType.BOOL)
    w.add_key_value("dflash.has_confidence_head", True, GGUFValueType.BOOL)
    copy_tokenizer(w, reader)
    w.add_key_value("tokenizer.ggml.mask_token_id", mask_token_id(reader, hp.n_vocab), u32)
    for tname, arr in tensors.items():
        if arr.ndim == 1 or tname.startswith("conf_proj"):
            w.add_tensor(tname, np.ascontiguousarray(arr, dtype=np.float32))
        else:
            add_matrix(w, tname, arr, qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def gguf_tensors(reader):
    """A GGUF's tensors as float32 arrays (shape as numpy reads them: [out, in])."""
    from gguf.quants import dequantize
    return {t.name: np.asarray(dequantize(t.data, t.tensor_type), np.float32)
            for t in reader.tensors}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, help="the target GGUF")
    ap.add_argument("--ckpt", help="a train.py checkpoint (.npz)")
    ap.add_argument("--from-gguf", help="re-export the tensors of a drafter GGUF instead")
    ap.add_argument("--out", required=True)
    ap.add_argument("--type", default="q8_0", choices=sorted(QTYPES))
    ap.add_argument("--name", default="flint DSpark drafter for SmolLM2-135M-Instruct")
    a = ap.parse_args()
    if a.from_gguf:
        r = GGUFReader(a.from_gguf)
        cfg = {
            "layers": int(r.fields["dflash.block_count"].contents()),
            "block": int(r.fields["dflash.block_size"].contents()),
            "taps": list(r.fields["dflash.target_layers"].contents()),
            "context_length": int(r.fields["dflash.context_length"].contents()),
        }
        tensors = gguf_tensors(r)
    else:
        import train  # the checkpoint layout lives with the model
        cfg, tensors = train.to_gguf_tensors(a.ckpt)
    write(a.out, a.model, cfg, tensors, QTYPES[a.type], a.name)
    print(f"{a.out}: {len(tensors)} tensors, {cfg}")


if __name__ == "__main__":
    main()
