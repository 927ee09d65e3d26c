"""A worker's reply is a claim until it passes these checks, made here from the files' bytes.

The worker runs whatever code the input smuggles past the loader, so what it says about the
input (each tensor's digest, NaN / Inf counts, the health judged from them) and about the
output it wrote (`verified`) may be a lie. This package is the one place the user's process
tests those claims, with readers that run nothing of the input (`rawtensors`). What the
input's bytes say (`expected.Expected`) is measured on a thread of its own while the worker
runs, and the worker's tensor records are held against it (`records`):

- `inspection.check_inspection`: every tensor the file holds reported once, with its dtype,
  shape and digest; its element and byte counts the ones they give, a plain strided tensor
  on the CPU (no `quantization`, no flags: nothing these readers locate is quantized, sparse
  or meta), its stride, storage offset and contiguity the loader's view of its place in the
  file (`RawTensor.placed`), and its `shared_with` exactly the tensors whose bytes overlap
  its own here (a sharing left out would make tied weights a duplicate warning);
  NaN / Inf recounted here (a dtype read as bytes on both sides, `bits8` or packed float4,
  with no statistics at all); a real tensor's range, largest magnitude, zeros
  and first NaN or Inf read here (what health judges a wiped weight from); the largest
  magnitude of the file's top binary order, and the orders (`exponents`, where a flipped
  exponent bit shows) counted here wherever an outlier may be; health judged here. Mean, std
  and the histogram stay the worker's, as it says.
- `inspection.check_digests`: the tensor digests `verify` compares with a manifest, checked
  the same way.
- `consistency.check_consistency`: the reply's mode, device, repeats, seed and injected fault
  the request's (a fault nobody asked for would make a failed run a passed self-test); the
  probe's rows, each tensor once with its SHA-256 (the device got the file's weights), every
  2-D+ float one probed, the probed count and bytes the file's, NaN / Inf recounted,
  `consistent` only when no row failed; every changed element it lists against the file
  (`consistency_elements`), its first NaN/Inf the one read here, each row's status its own
  checks', an asked fault among the device copy's differences, a CUDA device this host's GPU
  labelled as its driver names it; the repeats' outputs exist only in the worker.
- `diff.check_diff`: each row's dtypes, shapes and status, a changed row's element counts,
  NaN / Inf, bit flips, largest differences and sentence (`changes`), and the totals, from
  both sides' bytes compared here (`diff.SideBySide`); each row's file on each side and the
  key read for it there (a tie or a converter's alias), the `aliases` listing them, and the
  plain values that differ (`objects`, `tensor_pairs.object_changes` of both sides' values
  read here); each side's files' formats and tensor counts; the byte offsets of a tensor and
  of each flip in each file (computed here from where the tensor starts); the largest
  differences of every dtype either side decodes (float8 by its exact tables). A dtype with
  no bit layout (bits8 blocks, F4 / F6) is compared byte by byte here and its row written
  here; `not_compared` is refuted; a row compared by no element has its status's sentence
  and no numbers; `identical` is true exactly when every row is; no record of the answer has
  a field its contract lacks. A sharded side's index is checked against the files the keys
  were found in here.
- `conversion.check_conversion`: each tensor of the output safetensors file compared with the
  input's own storage bytes; every input tensor written, an alias of a written one with the
  same bytes, or skipped for a dtype safetensors cannot hold, and nothing else written. The
  digests reported are the ones computed here; the aliases and encoded tensors the output's
  header's, the selection the one asked (`Asked`).
- `errors`: the code a worker ends a job with, held against the request, the static scan and
  the tensors located here (a --key failure needs a --key; a weights_only refusal needs the
  scan to find what torch refuses, and offers only such globals).
- Every reply's `digest_algorithm` is this process's own, SHA-256 (`refusal.algorithm_problems`).

A file these readers cannot locate every tensor of (a pickle holding more than tensors, a DCP
folder) is not checked: the record says why, and output says the answer is the jailed loader's.
A claim that fails is `claim_refuted` (`refusal`): the whole reply is then untrusted. Bytes are
compared with libc's memcmp (`bytes_equal`).
"""
