"""Test stub of torch_npu (Ascend's PyTorch plugin): SGLang's NPU modules import it at
module level, but the KV connector's Python code never calls into it."""
