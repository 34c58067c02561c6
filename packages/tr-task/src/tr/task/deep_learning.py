"""DeepLearningTask: the seed's chain API, compile() into one arena, run() the epoch loop."""

from __future__ import annotations

import math
import time
from contextlib import closing
from typing import Any

import numpy as np

from tr.algo.loss import CrossEntropyLoss
from tr.algo.onehot_loss import BCEWithLogitsLoss, MSELoss
from tr.algo.scheduler import Scheduler
from tr.core.errors import CompileError, ConfigError, PhaseError, TrError
from tr.core.log import get_logger
from tr.core.phase import Phase
from tr.core.settings import GLOBAL_SETTING, Settings
from tr.data import PREPROCESSOR_SETTING
from tr.task import checkpoint, checkpoint_policy, ema, epoch_state, plateau, step_timing, tta
from tr.task.base import TaskBase
from tr.task.config import Config, TaskConfig
from tr.task.distributed import (
    DistEnv,
    Group,
    backend_options,
    bootstrap_timeout,
    broadcast_parameters,
    global_count,
    init_group,
    op_timeout,
    read_env,
)
from tr.task.executor import StepLauncher, capture_steps, scalar, train_mean_loss
from tr.task.feeder import Feeder
from tr.task.progress import Progress
from tr.task.recipe import RecipeSetters
from tr.task.report import EpochRecord, EpochTable, TrainingResult
from tr.task.resolve import Resolved, resolve
from tr.task.sinks import MetricsLog
from tr.task.validation import validate
from tr.task.weights import check_families, initialize_program, module_parameters

log = get_logger(__name__)

class DeepLearningTask(RecipeSetters, TaskBase):
    def __init__(self, settings: Settings | None = None) -> None:
        super().__init__()
        self._settings_source = settings or GLOBAL_SETTING
        self._cfg = TaskConfig()  # the chain methods' values (the tree's section "task")
        self._compiled_config: Config | None = None  # the frozen tree compile() read
        self._feeder: Feeder | None = None  # the feeder training reads: compile() completes and shards it
        self._sinks: MetricsLog | None = None  # the log while run() runs (rank 0 only)
        self._epoch_state = epoch_state.EpochState()  # inside an epoch, or after a cancelled one: no save
        self._ema_steps: ema.EmaSteps | None = None
        self.group: Group | None = None  # this process's rank group when training data-parallel
        self._val_samples = 0.0  # what validation sums are divided by (global mean of per-rank counts)
        self.program = None
        self.spec = None  # the CompileSpec the plan was compiled from (inspection, tests)
        self._resolved: Resolved | None = None  # compile's resolved configuration (tr.task.resolve)
        self.backend = None
        self._steps = None
        self._epochs_done = 0  # completed epochs over every run(): numbering and the schedule continue
        self._lr_table: np.ndarray | None = None
        self._plateau = None  # ReduceLROnPlateau's state between epochs (tr.task.plateau)
        self._recorded_env: dict[str, Any] | None = None  # compile's recorded variables (checkpoint.describe)
        self.settings: Settings | None = None

    # --- the chain API (PLANNING only) ------------------------------------------------------------
    def _plan(self, action: str) -> DeepLearningTask:
        self._require(Phase.PLANNING, action)
        return self

    def model(self, blueprint) -> DeepLearningTask:
        self._plan("model()")
        from tr.graph.blueprint import BluePrint, Layer

        if not isinstance(blueprint, (BluePrint, Layer)):
            raise ConfigError(f"model() takes a BluePrint or a layer such as seq(...), got {blueprint!r}")
        self._cfg._set("model", blueprint)
        return self

    def loss(self, loss: CrossEntropyLoss | BCEWithLogitsLoss | MSELoss) -> DeepLearningTask:
        """The training loss: CrossEntropyLoss (the default), or BCEWithLogitsLoss / MSELoss against the one-hot
        label (tr.algo.onehot_loss); each with its label smoothing."""
        self._plan("loss()")
        if not isinstance(loss, (CrossEntropyLoss, BCEWithLogitsLoss, MSELoss)):
            raise ConfigError(f"loss must be a CrossEntropyLoss, BCEWithLogitsLoss or MSELoss, got {loss!r}")
        self._cfg._set("loss", loss)
        return self

    def initializer(self, init) -> DeepLearningTask:
        self._plan("initializer()")
        self._cfg._set("initializer", init)
        return self

    def optimizer(self, opt) -> DeepLearningTask:
        self._plan("optimizer()")
        if not hasattr(opt, "kind"):
            raise ConfigError(f"optimizer must be SGD, LARS, Adam or AdamW from tr.algo, got {opt!r}")
        self._cfg._set("optimizer", opt)
        return self

    def tta(self, flip: bool | str = True, shift_px: int = 0) -> DeepLearningTask:
        """Test-time augmentation of validation and predict(): the mean softmax probabilities of the image, its
        shifts by ``shift_px`` pixels (edge-replicated) and with ``flip`` their horizontal mirrors (tr.task.tta).
        The seed's names are accepted: tta("lr"), tta("shift_1px"), tta("disabled"). Training is unchanged."""
        self._plan("tta()")
        self._cfg._set("tta", tta.parse(flip, shift_px))
        return self

    def scheduler(self, sched: Scheduler) -> DeepLearningTask:
        self._plan("scheduler()")
        if not isinstance(sched, Scheduler):
            raise ConfigError(f"scheduler must be a tr.algo scheduler, got {sched!r}")
        self._cfg._set("scheduler", sched)
        return self

    def total_epochs(self, n: int) -> DeepLearningTask:
        self._plan("total_epochs()")
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ConfigError(f"total_epochs must be an integer >= 1, got {n!r}")
        self._cfg._set("epochs", n)
        return self

    def num_classes(self, n: int) -> DeepLearningTask:
        self._plan("num_classes()")
        if isinstance(n, bool) or not isinstance(n, int) or n < 2:
            raise ConfigError(f"num_classes must be an integer >= 2, got {n!r}")
        self._cfg._set("num_classes", n)
        return self

    def validate_every(self, interval: int = 1, offset: int = 0) -> DeepLearningTask:
        self._plan("validate_every()")
        if not isinstance(interval, int) or interval < 1:
            raise ConfigError(f"validate_every interval must be >= 1, got {interval!r}")
        if not isinstance(offset, int) or offset < 0:
            raise ConfigError(f"validate_every offset must be >= 0, got {offset!r}")
        self._cfg._set("validate_every", (interval, offset))
        return self

    def early_stop_by_top1(self, threshold: float = 1.0) -> DeepLearningTask:
        self._plan("early_stop_by_top1()")
        if not 0.0 < float(threshold) <= 1.0:
            raise ConfigError(f"early_stop_by_top1 threshold must be in (0, 1], got {threshold!r}")
        self._cfg._set("early_stop", float(threshold))
        return self

    def data(self, feeder: Feeder) -> DeepLearningTask:
        """Where batches come from (default: tr.data's PREPROCESSOR_SETTING)."""
        self._plan("data()")
        self._cfg._set("data", feeder)
        return self

    def device(self, name: str) -> DeepLearningTask:
        self._plan("device()")
        if name not in ("cpu", "cuda", "auto"):
            raise ConfigError(f"device must be 'cpu', 'cuda' or 'auto', got {name!r}")
        self._cfg._set("device", name)
        return self

    def distributed(self, env: DistEnv | None = None, timeout_s: float | None = None) -> DeepLearningTask:
        """Train data-parallel, one process per device: ``env`` (default: the launcher's variables, see
        tr.task.distributed) names this rank, the settings' global batch size is split evenly over the ranks,
        the feeder serves this rank's share. ``timeout_s`` bounds the bootstrap (default TR_DIST_TIMEOUT or
        300 s). Automatic, with the defaults, when tr-run/torchrun/mpirun start more than one rank."""
        self._plan("distributed()")
        env = read_env() if env is None else env
        if not isinstance(env, DistEnv):
            raise ConfigError(f"distributed() takes a tr.task.distributed.DistEnv, got {env!r}")
        bootstrap_timeout(timeout_s)
        self._cfg._set("distributed", (env, timeout_s))
        return self

    def on_step(self, fn) -> DeepLearningTask:
        """Call ``fn(step_in_epoch, result)`` after every training step (result = [loss, top1, top5]); with
        accumulate(k), after every optimizer step, with the window's mean result.

        For tests and debugging: it reads device memory every step, which a production loop never does.
        """
        self._cfg._set("on_step", fn)
        return self

    def log_to(self, directory, plots: bool | None = None, tensorboard: bool | None = None) -> DeepLearningTask:
        """Write every epoch's record to ``directory``: metrics.csv and metrics.jsonl (appended to by later
        runs), loss/accuracy/lr PNG plots (``plots``: None = when matplotlib is installed, True = required)
        and TensorBoard scalars under tensorboard/ (``tensorboard``: likewise). Only rank 0 writes."""
        self._cfg._set("log", MetricsLog(directory, plots=plots, tensorboard=tensorboard))
        return self

    def checkpoint_every(self, epochs: int, directory, keep_last: int = 1,
                         keep_best: str | None = None) -> DeepLearningTask:
        """Every ``epochs`` epochs save ``directory``/epoch-NNNN, keep the newest ``keep_last``; ``keep_best``
        ("top1", "top5", "val_loss": need validation data; "train_loss"): also best/. tr.task.checkpoint_policy."""
        self._cfg._set("checkpoints", checkpoint_policy.CheckpointPolicy(epochs, directory, keep_last, keep_best,
                                                                                   self._feeder or self._cfg.data))
        return self

    def save(self, path) -> DeepLearningTask:
        """Write a checkpoint directory at ``path`` (atomically, only over a tr checkpoint), between epochs only
        (tr.task.epoch_state). Data-parallel: every rank calls it, rank 0 writes. See tr.task.checkpoint."""
        self._require(Phase.COMPILED, "save()")
        checkpoint.save(self, path)
        return self

    def resume(self, path, allow_data_change: bool = False) -> DeepLearningTask:
        """Continue from the checkpoint at ``path`` in a task configured as the run that saved it (total_epochs
        may grow if the schedule's past stays): ``resume(path).run()`` gives the bytes of an unbroken run. Damage
        (DataError), another model, configuration or data (ConfigError naming it) are refused before anything
        loads; ``allow_data_change=True`` resumes on other data on purpose. Compiles the task if needed."""
        if self._phase is Phase.PLANNING:
            checkpoint.compile_for(self, path)  # (autotuned engines pinned as the saved run chose them)
        self._require(Phase.COMPILED, "resume()")
        if self.group is None:
            checkpoint.load(self, path, allow_data_change)
            return self
        # Data-parallel: a rank that refuses (its own data, its own description) tells the others now, so every
        # rank fails with the reason instead of the others waiting in the first collective until its timeout.
        refused: TrError | None = None
        try:
            checkpoint.load(self, path, allow_data_change)
        except TrError as e:
            refused = e
        self.group.agree("the resume", {"refused": None if refused is None else f"{type(refused).__name__}: "
                                                                                 f"{refused}"})
        if refused is not None:  # every rank refused alike
            raise refused
        return self

    def quiet(self, quiet: bool = True) -> DeepLearningTask:
        self._cfg._set("quiet", bool(quiet))
        return self

    # --- compile ----------------------------------------------------------------------------------
    @property
    def config(self) -> Config:
        """The configuration tree (tr.task.config): after compile() the frozen tree the plan was compiled from;
        before, the live sections the chain methods, the settings and PREPROCESSOR_SETTING write."""
        if self._compiled_config is not None:
            return self._compiled_config
        return Config(self._settings_source, PREPROCESSOR_SETTING if self._cfg.data is None else None, self._cfg)

    def compile(self) -> DeepLearningTask:
        self._no_backwards("compile()")
        self._require(Phase.PLANNING, "compile()")
        if self._cfg.model is None:
            raise CompileError("compile(): no model; call model(seq(...)) first")
        if self._cfg.optimizer is None:
            raise CompileError("compile(): no optimizer; call optimizer(SGD()/Adam()/...) first")
        live = self.config
        source, was_frozen = live.settings, live.settings.frozen
        source.freeze()
        self._cfg.freeze()
        try:
            return self._compile(Config(source.snapshot(), live.data, self._cfg))
        except BaseException:
            # a failed compile leaves nothing held: the settings can be changed again and the task retried
            if not was_frozen:
                source.thaw()
            self._cfg.thaw()
            self._feeder = self._compiled_config = None
            if self._phase is Phase.MEMORY_LOCKED:  # failed after the plan: drop it, its arena and graphs
                self.program = self.backend = self._steps = self._ema_steps = self.group = None
                self._back_to_planning()
            raise

    def _compile(self, config: Config) -> DeepLearningTask:
        s, c = config.settings, config.task
        self.settings = s
        r = resolve(config)  # every derived value, each checked once; nothing allocated yet (commits the data)
        self._compiled_config = r.config
        self._resolved, self._recorded_env, self._sched, self._feeder = r, r.recorded_env, r.schedule, r.feeder
        env, feeder, has_val = r.env, r.feeder, r.has_val

        from tr.backend.registry import get_backend
        from tr.graph.compiler import compile_program

        spec = self.spec = r.compile_spec()
        self.program = compile_program(c.model, spec)
        check_families(self.program, c.initializer)
        self._advance(Phase.MEMORY_LOCKED)
        if env is not None:  # join the world; every rank must then hold the same plan
            self.group = init_group(env, r.timeout_s)
            self.group.agree("the plan", r.agreement(spec, [list(i.tensor.shape.dims) for i in self.program.inits]))
        kind, options = backend_options(r.backend, self.group, r.cuda_device)
        self.backend = get_backend(kind, **options)
        if c.device == "auto" and self.backend.name != "cuda":
            from tr.backend.cuda import cuda_status

            log.info("no usable CUDA device (%s): training on the CPU backend", cuda_status()[1])
        self.backend.configure(tf32=s.tf32)
        self.backend.allocate(self.program.layout)
        if feeder.adopts_buffers:
            # staging buffers in the backend's pinned memory: DMA-able, never page-locked after the fact
            pinned = self.backend.host_buffers(feeder.batch, feeder.staging_shape, feeder.sample_dtype)
            if pinned is not None:
                feeder.adopt_buffers(pinned)
        self.backend.bind_host_buffers(feeder.buffers())
        initialize_program(self.backend, self.program, s, c.initializer, rank=r.rank)
        feeder.upload(self.backend, self.program)  # a resident input's data sets (tr.task.resident)
        feeder.begin_epoch(self.backend, self.program, 0)
        # the learning rate of every step, read on the device by lr_lookup: the loop never writes it
        self._lr_table = self._sched.table()
        self.backend.write(self.program.tensor("lr_table"), self._lr_table)
        self._plateau = plateau.start(self)  # (ReduceLROnPlateau: rewrites the table between epochs)
        # validation metrics are sums over this rank's samples, averaged over ranks by the step val_end
        self._val_samples = float(feeder.num_samples(False))
        if self.group is not None:
            broadcast_parameters(self.backend, self.program, self.group.collective)
            self._val_samples = global_count(self.group.collective, feeder.num_samples(False))
        self._steps = capture_steps(self.backend, self.program, has_val)
        if c.ema is not None:
            self._ema_steps = ema.capture_ema(self.backend, self.program, c.ema.validate)
        self._advance(Phase.COMPILED)
        log.info("compiled: %d ops, arena %.1f MiB on %s", self.program.num_ops,
                 self.program.layout.total_bytes / 2**20, self.backend.name)
        return self

    # --- run --------------------------------------------------------------------------------------
    def run(self, epochs: int | None = None) -> TrainingResult:
        """Train ``epochs`` more epochs (default: those of total_epochs not done yet, or total_epochs again
        when all are); epoch numbers and the schedule continue. An exception cancels the epoch but not the steps
        it applied: a later run() starts that epoch again from the weights, optimizer state and step counter they
        left (unlike an unbroken run), and save() is refused until an epoch completes (tr.task.epoch_state)."""
        if self._phase is not Phase.COMPILED:
            raise PhaseError(f"run() needs a compiled task; the task is in {self._phase.name}: call compile() first")
        if epochs is not None and (isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1):
            raise ConfigError(f"run(epochs) must be an integer >= 1, got {epochs!r}")
        n = epochs or (self._cfg.epochs - self._epochs_done) or self._cfg.epochs
        wd = self._watchdog()
        self._launch = StepLauncher(self.backend, wd)
        main = self.group is None or self.group.is_main
        self._sinks = self._cfg.log.open() if self._cfg.log is not None and main else None
        try:
            return self._train(n)
        finally:
            if wd is not None:
                wd.stop()
            if self._sinks is not None:  # after a crash too: the plots show the epochs that finished
                self._sinks.close()

    def _watchdog(self):
        """With an NCCL communicator: a started NcclWatchdog (tr.backend.cuda.watchdog), else None."""
        nccl = getattr(self.backend, "nccl", None)
        if nccl is None:
            return None
        from tr.backend.cuda.watchdog import NcclWatchdog

        # a collective may legitimately wait this long for a slow rank (the gloo collective's op timeout)
        timeout = getattr(getattr(self.group, "collective", None), "timeout_s", None) or op_timeout()
        return NcclWatchdog(nccl, timeout).start()

    def _device_lr(self) -> float:
        """The LR the device's next step reads: lr_table[min(step, len - 1)] with the device's step counter
        (after the schedule's end, its last value), so the log shows what actually trains."""
        step = int(scalar(self.backend, self.program, "step")[0])
        return float(self._lr_table[min(step, len(self._lr_table) - 1)])

    def _train(self, n_epochs: int) -> TrainingResult:
        feeder, be, prog = self._feeder, self.backend, self.program
        wd = self._launch.watchdog
        has_val = feeder.num_samples(False) > 0
        main = self.group is None or self.group.is_main  # only rank 0 prints
        table = EpochTable(validate=has_val, ema=bool(self._cfg.ema and self._cfg.ema.validate)) \
            if not self._cfg.quiet and main else None
        result = TrainingResult()
        interval, offset = self._cfg.validate_every
        t_all = time.perf_counter()
        skipped_before = int(scalar(be, prog, "skipped")[0])
        first = self._epochs_done
        if self._cfg.checkpoints is not None:  # keep_best's metric, the targets: before the first epoch trains
            self._cfg.checkpoints.begin(self, first + n_epochs)
        if self._cfg.ema is not None and first == 0:  # the EMA starts from the weights training starts from
            be.launch(self._ema_steps.start)
        for epoch in range(first, first + n_epochs):
            t0 = time.perf_counter()
            validate = has_val and (epoch + 1 - offset) >= 0 and (epoch + 1 - offset) % interval == 0
            with self._epoch_state.epoch(self, epoch):  # an exception cancels the epoch (tr.task.epoch_state)
                rec = self._epoch(epoch, main, validate)
            self._epochs_done = epoch + 1
            skipped_total = int(scalar(be, prog, "skipped")[0])  # counted on the device, read once an epoch
            rec.skipped_steps, skipped_before = skipped_total - skipped_before, skipped_total
            if rec.skipped_steps:
                log.warning("epoch %d: %d step(s) with non-finite gradients skipped (loss scale now %g)",
                            epoch + 1, rec.skipped_steps, float(scalar(be, prog, "loss_scale")[0]))
            result.skipped_steps += rec.skipped_steps
            result.add(rec)
            if wd is not None:
                wd.disarm()  # host work between epochs (a checkpoint) may take long on one rank
            rec.seconds = time.perf_counter() - t0
            result.history.append(rec)
            result.epochs = epoch + 1
            plateau.after_epoch(self, rec)  # ReduceLROnPlateau: before a save, which records the rule's state
            if self._cfg.checkpoints is not None:  # every rank takes part in a save; rank 0 writes
                self._cfg.checkpoints.after_epoch(self, rec)
            if table:
                table.row(rec)
            if self._sinks is not None:
                self._sinks.write(rec)
            if not math.isfinite(rec.train_loss):
                log.warning("epoch %d: training loss is %s", epoch + 1, rec.train_loss)
            if rec.top1 is not None and rec.top1 >= self._cfg.early_stop:
                log.info("Early stop triggered at epoch %d (top1 %.4f >= %.4f)", epoch + 1, rec.top1,
                         self._cfg.early_stop)
                result.early_stopped = True
                break
        if table:
            table.close()
        result.seconds = time.perf_counter() - t_all
        return result

    def _epoch(self, epoch: int, main: bool, validate: bool) -> EpochRecord:
        """Train epoch ``epoch`` (0-based) and validate it when asked; the record's times are the caller's."""
        feeder, be, prog, st, launch = self._feeder, self.backend, self.program, self._steps, self._launch
        if launch.watchdog is not None:
            launch.watchdog.arm()
        steps, window = feeder.steps(True), self._cfg.accumulate  # micro-steps; micro-batches an optimizer step
        feeder.begin_epoch(be, prog, epoch)  # (a resident input: the epoch's augmentation key)
        be.launch(st.clear_metrics)
        be.launch(st.epoch_begin)
        launch.prepare(st.epoch_order)  # (a resident data set: the epoch's order, on the device)
        bar = Progress(steps, f"epoch {epoch + 1} train", enabled=main and not self._cfg.quiet)
        lr0 = self._device_lr()
        t_pass = time.perf_counter()
        side = self._side(epoch)
        if side is not None:  # progressive resizing: the pipeline's crop size and the steps follow the epoch
            feeder.train_side(side)
        transfer = st.transfer_at(side)
        with closing(feeder.epoch(epoch, True)) as batches:  # closed on an exception too: zones released
            train, train_last, train_hold = st.training(self._frozen(epoch), side)
            for k, buf, _n in batches:
                closes = k % window == window - 1 or k == steps - 1  # the device decides too (accum_window)
                graphs = (train_last if k == steps - 1 else train if closes or train_hold is None
                          else train_hold)
                launch(transfer[buf], graphs[buf], buf)
                feeder.release(k)
                if closes and self._cfg.on_step is not None:  # once an optimizer step, numbered as such
                    self._cfg.on_step(k // window, be.read(prog.tensor("result")).reshape(-1))
                bar.update(k + 1)
        bar.close()
        be.launch(st.epoch_end)
        launch.synchronize()
        train_loss = train_mean_loss(be, prog)  # over the applied steps: a skipped one's loss is not summed
        rec = EpochRecord(epoch + 1, train_loss, lr0, 0.0)
        rec.cpu_decoded = feeder.decoded_on_cpu()  # (device_decode: read before validation decodes again)
        times = feeder.last_epoch_times()
        if times is not None:  # read before validation runs the pipeline again
            wall = time.perf_counter() - t_pass
            rec.data_wait_s = round(sum(times.consumer_wait_s), 6)
            rec.pipeline_busy = round(times.busy_fraction(wall), 4)
        if validate:
            rec.val_loss, rec.top1, rec.top5 = self._validate(epoch)
        if self._cfg.ema is not None:
            ema.after_epoch(self, epoch, rec, validate)
        return rec

    def _side(self, epoch: int) -> int | None:
        """Progressive resizing: epoch ``epoch``'s (0-based) training side (past the schedule, its final side);
        None without a schedule."""
        sides = self._resolved.train_sides
        return (sides[epoch] if epoch < len(sides) else sides[-1]) if sides else None

    def _frozen(self, epoch: int) -> bool:
        """Whether epoch ``epoch`` (0-based) trains with the first trained layer frozen."""
        after = self._cfg.freeze_first_after
        return after is not None and epoch >= after

    def _validate(self, epoch: int, val=None, val_last=None, label: str = "val",
                  ema: bool = False) -> tuple[float, float, float]:
        """(loss, top1, top5) of the main model, or of the model whose step graphs ``val``/``val_last`` are."""
        return validate(self, epoch, val, val_last, label, ema)

    def dry_run(self):
        """One training and one validation step on the task's data, then every state tensor restored (a following
        run() gives the bytes it gives without it); returns (and unless quiet logs) a tr.task.dry_run.DryRunReport:
        arena bytes by memory role, op calls per step, launches per step, engines, host buffers."""
        from tr.task.dry_run import dry_run

        report = dry_run(self)
        if not self._cfg.quiet:
            log.info("%s", report)
        return report

    # --- inspection -------------------------------------------------------------------------------
    def weights(self) -> dict[str, np.ndarray]:
        """Copies of every parameter tensor (master weights, FP32), by name."""
        if self._phase is not Phase.COMPILED:
            raise PhaseError("weights() needs a compiled task")
        return {i.tensor.name: self.backend.read(i.tensor).copy() for i in self.program.inits}

    def parameters(self) -> list[tuple[np.ndarray, ...]]:
        """Per weight-bearing module, in layer order: copies of its trained parameters (every master of role
        PARAM), (weight, bias) or (weight,) of a conv or fc, (gamma, beta) of a batch or layer norm. A fused
        conv+BN layer (cbr) gives its conv and its BN as two entries, as the BluePrint declared them."""
        if self._phase is not Phase.COMPILED:
            raise PhaseError("parameters() needs a compiled task")
        return module_parameters(self.backend, self.program)

    # --- models out and in (tr.task.predict, tr.task.torch_io) ------------------------------------
    def predict(self, batch: Any, output: str = "logits", *, input: str = "normalized",
                nonfinite: str = "raise") -> np.ndarray:
        """The validation forward on n >= 1 samples: logits [n, classes], or ``"probs"`` / ``"argmax"``.
        ``input="normalized"``: NHWC float samples as validation is fed them (normalised); ``"raw"``: uint8
        images as the data set stores them, normalised by the task's validation chain. ``nonfinite``: "raise"
        or "flag" (NaN rows, class -1). See tr.task.predict.predict."""
        from tr.task.predict import predict

        return predict(self, batch, output, input=input, nonfinite=nonfinite)

    def load_torch(self, source) -> DeepLearningTask:
        """Load a torch model's (or its state_dict's) weights and BN statistics; run() then fine-tunes them."""
        from tr.task.torch_io import load_torch

        load_torch(self, source)
        return self

    def to_torch(self, target) -> dict[str, Any]:
        """The weights and BN statistics as a state_dict for ``target`` (an nn.Module or a state_dict)."""
        from tr.task.torch_io import to_torch_state_dict

        return to_torch_state_dict(self, target)

    @property
    def feeder(self) -> Feeder | None:
        """The feeder training reads (the one given to data(), or the one compile() built from
        PREPROCESSOR_SETTING); None before compile() when none was given."""
        f = self._feeder or self._cfg.data
        return getattr(f, "wrapped", f)

    @property
    def launches_per_step(self) -> int:
        """Host launches per training step: the transfer graph and the whole-step graph."""
        return self._steps.launches_per_step

    def host_us_per_step(self, n: int = 200) -> float:
        """Host microseconds to queue one training step (a benchmark helper: trains n more steps after run());
        see tr.task.step_timing."""
        self._require(Phase.COMPILED, "host_us_per_step()")
        return step_timing.host_us_per_step(self.backend, self._steps, n)

    def time_train_step(self, n: int = 100, warmup: int = 10) -> float:
        """Seconds per launch of the captured full-batch training step (a benchmark helper: trains warmup + n
        more steps on buffer A's batch, so call it after run()); see tr.task.step_timing. With accumulate(k) a
        launch is a micro-step (every k-th also applies the optimizer)."""
        self._require(Phase.COMPILED, "time_train_step()")
        return step_timing.time_train_step(self.backend, self._steps, n, warmup)

    def describe(self) -> dict[str, Any]:
        return {"backend": getattr(self.backend, "name", None), "ops": self.program.num_ops if self.program else 0}
