"""Names vulture cannot see used (tests/test_code_shape.py reads this file as a whitelist; never imported).

Each is called or read by something outside hookkit's source: a framework, Python itself, or the user.
"""

# ruff: noqa
_ = object()

# module __getattr__ (PEP 562): Python calls it for names loaded on first use
__getattr__
# the import system calls a loader's create_module / exec_module (core/deprecation.moved_modules)
_.create_module
_.exec_module
# attributes torch reads: functools' wrapper mark, dynamo's guard switch, the flop counter's raw getter
_.__wrapped__
_.skip_nnmodule_hook_guards
_._get_raw
# arguments and methods of the callbacks Lightning, the Hugging Face Trainer and Paddle hapi call by name
control, batch_idx, stage
_.on_fit_start, _.on_train_batch_start, _.on_train_batch_end, _.on_train_epoch_end, _.on_fit_end, _.on_exception, _.teardown
_.on_train_begin, _.on_log, _.on_train_end, _.on_epoch_end
# IPython's rich display of a figure
_._repr_png_
# the flop counter's handlers take the operator's whole signature
out_val, out_shape, hx
# public API: a model family's layer stack registered by the user (docs/architectures.md)
_.register_stack
# operation sites: the installed forward's signature (generate() and friends inspect it); the def
# node's decorators cleared before compiling (the rewritten forward's decorators are rebuilt from cells)
# the operation sites' forward wrapper: pickle calls __reduce_ex__(protocol); inspect reads __signature__;
# compile() reads the rewritten function's decorator_list (emptied on the ast node)
protocol
_.__signature__
_.decorator_list
# argparse reads a parser's formatter_class when it prints --help (apps/cli.py sets it after building the parser)
_.formatter_class
