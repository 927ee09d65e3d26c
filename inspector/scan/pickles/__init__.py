"""The pickle walker and its policy: a static emulation of the unpickler (`walker`: its loop and
the hot opcodes; `cold_ops`: every other opcode; `state`: what one walk holds; `records`: what
it records; `values`: what it pushes in place of objects; `unbuffered`: how a reader without
peek() reads a FRAME; `fastpath`: torch's per-tensor run in one step; `stack_check`: a pickle's
stack and memo checked as `pickletools.dis` checks them, without its text), the facts about
opcodes (`opcodes`), the allow-list, deny list and capabilities of every global (`policy`), what
benign saves call and what each allowed callable does with its arguments (`calls`), and the
presets a user may allow with the NumPy dtype classes they name (`presets`).
Torch-free; imports only `core`."""
