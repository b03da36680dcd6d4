"""The kinds of preload server: what each imports and warms up before it serves, which scripts
it forks, and which interpreter wrapper routes to it. One table per question, keyed by kind, so
that the server, the wrappers and whoever starts the servers read the same answer."""

# What each kind of worker imports before its first call (module names, in order).
PRELOADS = {
    "vllm": ("torch", "transformers", "vllm.entrypoints.llm", "vllm.v1.engine.core",
             "vllm.v1.worker.cpu_worker", "vllm.model_executor.models.qwen2",
             "vllm.model_executor.models.qwen3"),
    # (torch._dynamo: the optimizer's constructor imports it, 0.7 CPU-s; mindrl.config: the
    # worker's own import, with Hydra's)
    "megatron": ("torch", "transformers", "mindrl.rank_imports", "torch._dynamo",
                 "mindrl.config"),
    # a run's driver (cli/train_grpo.py), where a test or script starts many: no pyplot (the
    # driver picks its backend first)
    "driver": ("torch", "transformers", "transformers.models.auto.tokenization_auto", "hydra",
               "hydra.utils", "omegaconf", "math_verify", "torch.utils.tensorboard",
               "matplotlib", "matplotlib.figure", "ray", "ray.util.placement_group",
               "ray.dashboard.optional_deps"),
    # Ray's setup step, run before every worker that has a runtime_env (all of a run's): it
    # imports Ray (about 0.8 CPU-s) only to read the runtime_env and exec the worker.
    "ray_setup": ("ray._private.workers.setup_worker",),
    # The Python processes of a local Ray node's head besides its workers and agents (the
    # dashboard's API server, the log monitor, the autoscaler's monitor): Ray and its
    # dashboard's imports, about 0.7-0.9 CPU-s each. (The agents, started by the raylet, take
    # the raylet for dead unless it is their parent: they start plainly.)
    "ray_node": ("ray.dashboard.dashboard", "ray._private.log_monitor",
                 "ray.autoscaler._private.monitor"),
}
RAY_NODE_SCRIPTS = ("dashboard/dashboard.py", "_private/log_monitor.py",
                    "autoscaler/_private/monitor.py")
# The only scripts a kind's server forks (others start plainly, noted): an EXEC_ONLY kind's
# one, a node's processes.
ONLY_SCRIPTS = {"ray_setup": ("setup_worker.py",), "ray_node": RAY_NODE_SCRIPTS}
# Kinds that import Ray: their forks are never a Ray worker (a driver connects as one, EXEC_ONLY
# execs, a node's process never connects).
RAY_IMPORTING = ("driver", "ray_setup", "ray_node")
# Variables compared besides environment.IMPORT_TIME_ENV, by kind: Ray's modules read RAY_
# ones at import.
KIND_IMPORT_TIME_ENV = {"ray_node": ("RAY_",), "driver": ("RAY_",)}
# Kinds whose forks only work out what to exec next, and the one script they run: the fork
# runs it until it calls os.execvp and sends back that call and its environment, which the
# client execs itself (it stays the process its starter watches). Nothing the server imported
# outlives the exec, so such a server may import Ray and takes any environment.
EXEC_ONLY = {"ray_setup": "setup_worker.py"}
# The interpreters `write_python_wrapper` leaves beside the sockets, by kind; ray_setup's is
# the interpreter of a local node's processes (`ray_node_python`).
WRAPPERS = {"driver": "python", "ray_setup": "python-ray-node"}
# What each kind then calls once (`module:function`), so that no worker repeats it: vLLM's
# sampler helper compiled for any vocabulary (engines/vllm_warm.py), with it torch inductor's
# list of this machine's vector instruction sets (4 probe processes); vLLM's CPU kernel
# overrides registered.
WARM_UPS = {"vllm": ("torch._inductor.cpu_vec_isa:valid_vec_isa_list",
                     "mindrl.engines.vllm_warm:compile_sampler_helpers",
                     "mindrl.engines.vllm_warm:register_kernel_overrides")}
