"""The batch policy-optimisation loop shared by VPG and TRPO: sample, process, update, record.

With ``plot=True`` the loop drives an :class:`async_plotter.Plotter`: the plotter rebuilds the env
and the policy in its own processes and receives only the flat parameter vector after each
iteration, so watching the policy costs the training loop next to nothing.
"""
import contextlib
import logging
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

import gymnasium as gym
import numpy as np
import tensorflow as tf

from async_plotter.rl import context as experiment_context
from async_plotter.rl import interrupts
from async_plotter.rl.baselines import Baseline, LinearFeatureBaseline
from async_plotter.rl.env_mirror import EnvMirror
from async_plotter.rl.envs import EnvMaker
from async_plotter.rl.logger import console_logging, format_duration, format_table
from async_plotter.rl import resume
from async_plotter.rl.recorder import RunRecorder
from async_plotter.learning_curve import SHOWN_RETURN
from async_plotter.rl.sample_processing import ProcessedSamples, process_samples
from async_plotter.rl.shown_returns import ShownReturns
from async_plotter.rl.samplers import ParallelSampler, Sampler, SerialSampler
from async_plotter.validation import (non_negative_int, optional_non_negative_int, positive_int,
                                      unit_interval)
from async_plotter.words import amount

logger = logging.getLogger(__name__)


class BatchPolopt:
    """Base class of batch on-policy algorithms; subclasses implement :meth:`optimize_policy`.

    Args:
        env: a gymnasium id (preferred: samplers and the plotter build their own copies), a
            zero-argument factory, or a live ``gymnasium.Env`` (rebuilt from its registration
            where another process needs it).
        policy: a policy following the protocol of :mod:`async_plotter.rl.policies`.
        baseline: a :class:`~async_plotter.rl.baselines.Baseline`; default
            :class:`~async_plotter.rl.baselines.LinearFeatureBaseline`.
        max_path_length: steps after which a path is cut.
        batch_size: environment steps per iteration (whole paths, at least this many).
        n_itr: iterations to run (``start_itr`` .. ``n_itr - 1``).
        discount, gae_lambda: return discount and GAE's lambda (1.0: returns minus baseline).
        center_adv: normalise advantages to zero mean and unit variance.
        bootstrap_truncated: value a path cut by a time limit with the baseline's estimate of the
            state it stopped in, instead of 0 as rllab did (see
            :func:`~async_plotter.rl.sample_processing.process_samples`).
        store_paths: put the sampled batch into each snapshot.
        plot: watch the policy in an :class:`async_plotter.Plotter` while training (default
            off; ``run_experiment_lite(plot=...)`` overrides it, with a log line if you set it).
        plot_kwargs: extra keyword arguments for the plotter.
        pause_for_plot: as rllab: after each iteration's plot update, wait for Enter
            ("Plotting evaluation run: Press Enter to continue..."). Only when the plotter has a
            window open and stdin is a terminal; otherwise ignored, with one log line.
        sampler: a :class:`~async_plotter.rl.samplers.Sampler`; default from ``n_parallel``.
        n_parallel: worker processes for sampling (1: sample in this process).
        seed: seed of the sampling (None: drawn from numpy's global generator).
        log_dir: where to write progress.csv, the learning curve and snapshots when training
            outside ``run_experiment_lite`` (None: console only).
    """

    def __init__(self,
                 env: Any,
                 policy: Any,
                 baseline: Optional[Baseline] = None,
                 max_path_length: int = 500,
                 batch_size: int = 5000,
                 n_itr: int = 500,
                 start_itr: int = 0,
                 discount: float = 0.99,
                 gae_lambda: float = 1.0,
                 center_adv: bool = True,
                 bootstrap_truncated: bool = True,
                 store_paths: bool = False,
                 plot: Optional[bool] = None,
                 plot_kwargs: Optional[Dict[str, Any]] = None,
                 pause_for_plot: bool = False,
                 sampler: Optional[Sampler] = None,
                 n_parallel: int = 1,
                 seed: Optional[int] = None,
                 log_dir: Optional[str] = None) -> None:
        for method in ("get_param_values", "set_param_values", "get_actions"):
            if not callable(getattr(policy, method, None)):
                raise TypeError(f"policy must have a {method}() method "
                                f"({type(policy).__name__} has none)")
        self.env = env
        # Validate the env now (not when the first worker starts); a live env without a
        # registration can still be used in this process, so that case is not an error here.
        self.env_maker: Optional[EnvMaker] = None
        if not (isinstance(env, gym.Env) and env.spec is None):
            self.env_maker = EnvMaker.from_env(env)
        self.policy = policy
        self.baseline = LinearFeatureBaseline() if baseline is None else baseline
        self.max_path_length = positive_int("max_path_length", max_path_length)
        self.batch_size = positive_int("batch_size", batch_size)
        self.n_itr = positive_int("n_itr", n_itr)
        self.start_itr = non_negative_int("start_itr", start_itr)
        self.discount = unit_interval("discount", discount)
        self.gae_lambda = unit_interval("gae_lambda", gae_lambda)
        self.center_adv = bool(center_adv)
        self.bootstrap_truncated = bool(bootstrap_truncated)
        self.store_paths = bool(store_paths)
        self.plot = bool(plot)
        self._plot_given = plot is not None  # None: not set (off, unless run_experiment_lite)
        self.plot_kwargs = dict(plot_kwargs or {})
        self.pause_for_plot = bool(pause_for_plot)
        if sampler is None:
            n_parallel = positive_int("n_parallel", n_parallel)
            sampler = SerialSampler() if n_parallel == 1 else ParallelSampler(n_parallel)
        self.sampler = sampler
        self.seed = optional_non_negative_int("seed", seed)
        self.log_dir = log_dir
        self.history: List[Dict[str, Any]] = []
        #: the Plotter of the latest ``train()`` with plotting; after it, closed (``stats`` stay)
        self.plotter: Any = None
        self._plotting = False  # self.plotter is open and fed by this train()
        #: hands the plotter's history recordings to progress.csv's rows (None: no history)
        self._shown: Optional[ShownReturns] = None
        #: the plotter's copy of an env the samplers step in its place (None: none needed)
        self._mirror: Optional[EnvMirror] = None
        self._finished_training = False  # the last train() ran all its iterations
        self.current_itr = start_itr
        self._sampling: Optional[Sampler] = None  # the sampler of the last train()
        self._sampling_seed: Optional[int] = None  # the seed it drew with

    # ---- to implement -------------------------------------------------------------------------

    def optimize_policy(self, itr: int, samples: ProcessedSamples) -> Dict[str, float]:
        """Update the policy from one processed batch; return statistics for the table."""
        raise NotImplementedError

    def optimizer_state(self) -> Optional[Dict[str, Any]]:
        """What the optimizer carries from one iteration to the next (None: nothing, as TRPO's
        conjugate gradient), kept in the snapshot: a run resumed from it goes on as this one
        would have."""
        return None

    def restore_optimizer_state(self, state: Dict[str, Any]) -> None:
        """Take the ``optimizer_state()`` of the run resumed (an algorithm whose optimizer
        keeps nothing ignores it)."""

    def get_itr_snapshot(self, itr: int, samples: ProcessedSamples) -> Dict[str, Any]:
        """What ``params.pkl`` holds; the policy pickles as its recipe, parameters ride along.
        With the sampling seed and the optimizer's state, a run resumed from it samples and
        steps as this one would have gone on."""
        snapshot = {
            "itr": itr,
            "policy": self.policy,
            "policy_params": self.policy.get_param_values(),
            "baseline": self.baseline,
            "env": self.env_maker,
            "stats": self.history[-1] if self.history else {},
            "seed": self._sampling_seed,
            "optimizer_state": self.optimizer_state(),
        }
        if self._sampling is not None:  # what the env's wrappers learned (observation statistics)
            snapshot.update(env_states=self._sampling.env_states(),
                            env_state_layout=self._sampling.env_state_layout())
        if self.store_paths:
            snapshot["paths"] = samples.batch
        return snapshot

    # ---- helpers for subclasses ---------------------------------------------------------------

    def _tensors(self, samples: ProcessedSamples) -> Tuple[Any, ...]:
        """Observations, actions, advantages and old distribution parameters as tensors."""
        batch = samples.batch
        obs = tf.constant(batch.observations, tf.float32)
        actions = tf.constant(batch.actions, self.policy.distribution.action_dtype)
        advantages = tf.constant(samples.advantages, tf.float32)
        old_info = {k: tf.constant(v, tf.float32) for k, v in batch.agent_infos.items()}
        return obs, actions, advantages, old_info

    def _input_signature(self) -> Tuple[Any, ...]:
        """``tf.function`` signature of :meth:`_tensors`' output, any batch size."""
        dist = self.policy.distribution
        obs = tf.TensorSpec([None, self.policy.obs_dim], tf.float32)
        actions = tf.TensorSpec([None, *dist.action_shape], dist.action_dtype)
        advantages = tf.TensorSpec([None], tf.float32)
        old_info = {
            k: tf.TensorSpec([None, *shape], tf.float32)
            for k, shape in dist.info_shapes.items()
        }
        return obs, actions, advantages, old_info

    # ---- the loop -----------------------------------------------------------------------------

    def _settings(self, ctx: Optional[experiment_context.ExperimentContext]) -> Tuple[Any, ...]:
        """Plot flag, plotter arguments, sampler and seed, with the experiment's overrides."""
        plot_kwargs = dict(self.plot_kwargs)
        if ctx is None:
            return self.plot, plot_kwargs, self.sampler, self.seed
        if ctx.plot != self.plot and self._plot_given:
            # Said out loud, so that a plot flag the user set never quietly does nothing; louder
            # when plotting the algorithm asked for is being switched off.
            level = logging.INFO if ctx.plot else logging.WARNING
            logger.log(level, "run_experiment_lite(plot=%s) overrides the algorithm's plot=%s",
                       ctx.plot, self.plot)
        plot_kwargs.update(ctx.plot_kwargs)
        builtin = isinstance(self.sampler, (SerialSampler, ParallelSampler))
        if not builtin or ctx.n_parallel != self.sampler.n_parallel:
            if not builtin:
                name = type(self.sampler).__name__
                logger.warning("run_experiment_lite(n_parallel=%d) replaces the custom sampler %s",
                               ctx.n_parallel, name)
            n = ctx.n_parallel
            self.sampler = SerialSampler() if n == 1 else ParallelSampler(n)
        seed = self.seed if ctx.seed is None else ctx.seed
        return ctx.plot, plot_kwargs, self.sampler, seed

    def train(self) -> List[Dict[str, Any]]:
        """Run iterations ``start_itr .. n_itr - 1``; returns the per-iteration statistics.

        Sampler workers and the plotter are shut down however the loop ends (Ctrl-C included).
        """
        ctx = experiment_context.current_context()
        if ctx is not None:
            ctx.trained.append(self)
        plot, plot_kwargs, sampler, seed = self._settings(ctx)
        resuming = ctx is not None and ctx.resume is not None and ctx.trained == [self]
        if resuming:
            resume.apply_to(self, ctx.resume)
            seed = resume.sampling_seed(ctx.resume, seed)
            logger.info("resuming from %s: iteration %d on", ctx.resume.path, self.start_itr)
        # A run that starts past iteration 0 (resume_from, or start_itr set by hand after
        # loading a snapshot) goes on: its folder's outputs up to there are its own.
        resume_after = self.start_itr - 1 if self.start_itr > 0 else None
        if resume_after is not None:
            plot_kwargs = dict(plot_kwargs, resume_after=resume_after)
        sampler.check_env(self.env)
        self._finished_training = False
        recorder = ctx.recorder if ctx is not None else RunRecorder(self.log_dir)
        with contextlib.ExitStack() as cleanup:
            if ctx is None:  # as run_experiment_lite does
                holder = f"{type(self).__name__}.train()"
                cleanup.enter_context(recorder.claimed(holder, resume_after, speaker=holder))
                cleanup.enter_context(console_logging(recorder.debug_log))
            # ExitStack runs every callback even when one raises, in reverse order.
            cleanup.callback(sampler.shutdown)
            # Closed after the plotter: the last row gets the final policy's ShownReturn.
            cleanup.callback(recorder.close)
            if plot:
                # The recorder writes the scalars; the plotter adds the rollouts to the same run.
                tensorboard_dir = recorder.log_dir if recorder.tensorboard else None
                self.plotter = self._start_plotter(plot_kwargs, recorder.video_dir, tensorboard_dir,
                                                   ctx.resume if resuming else None)
                for row in recorder.rows:  # a resumed run's: the live page's curve goes on
                    if "AverageReturn" in row and "Iteration" in row:
                        self.plotter.add_metrics({"AverageReturn": row["AverageReturn"]},
                                                 iteration=int(row["Iteration"]))
                self._plotting = True
                self._shown = ShownReturns() if self.plotter.history_dir else None
                cleanup.callback(self._close_plotter, recorder)
            start = time.perf_counter()
            sampler.start(self.env, self.policy, seed)
            self._sampling, self._sampling_seed = sampler, getattr(sampler, "seed", None)
            if resuming:
                resume.restore_env_states(sampler, ctx.resume)
            loop_start = time.perf_counter()
            plotting = ", plotting" if plot else ""
            iterations = self.n_itr - self.start_itr
            logger.info("%s on %s: %s of %d steps, %s, %s (seed %s)%s",
                        type(self).__name__, self._env_name(),
                        amount(iterations, "iteration", "iterations"), self.batch_size, self.policy,
                        type(sampler).__name__, self._sampling_seed, plotting)
            logger.debug("sampler ready after %.1f s", loop_start - start)
            try:
                with interrupts.ctrl_c_kept():
                    for itr in range(self.start_itr, self.n_itr):
                        self.current_itr = itr
                        self._iteration(itr, sampler, recorder, start, loop_start)
            except KeyboardInterrupt:
                interrupts.arrived()
                logger.warning("interrupted at iteration %d; shutting down sampler and plotter",
                               self.current_itr)
                raise
            # Only a run that ended by itself waits for the final policy's video at close.
            self._finished_training = True
        # Training went on through a fault of its folder (a full device); what it could not
        # write even at the end is an error now, with everything else closed.
        recorder.raise_if_unwritten()
        return self.history

    def _iteration(self, itr: int, sampler: Sampler, recorder: RunRecorder, start: float,
                   loop_start: float) -> None:
        itr_start = time.perf_counter()
        batch = sampler.obtain_samples(itr, self.policy.get_param_values(), self.batch_size,
                                       self.max_path_length)
        sampled = time.perf_counter()
        interrupts.raise_if_lost()
        samples = process_samples(batch, self.baseline, self.discount, self.gae_lambda,
                                  self.center_adv, self.bootstrap_truncated)
        processed = time.perf_counter()
        interrupts.raise_if_lost()
        opt_stats = self.optimize_policy(itr, samples)
        optimized = time.perf_counter()
        interrupts.raise_if_lost()

        entropy = float(np.mean(self.policy.distribution.entropy_np(batch.agent_infos)))
        row: Dict[str, Any] = {"Iteration": itr}
        row.update(samples.stats)
        row["Entropy"] = entropy
        row["Perplexity"] = float(np.exp(entropy))
        if "log_std" in batch.agent_infos:
            row["AveragePolicyStd"] = float(np.mean(np.exp(batch.agent_infos["log_std"])))
        row.update(opt_stats)
        previous_steps = self.history[-1]["TotalEnvSteps"] if self.history else 0
        row["TotalEnvSteps"] = previous_steps + batch.num_steps
        row["SampleTime"] = sampled - itr_start
        row["ProcessTime"] = processed - sampled
        row["OptimizeTime"] = optimized - processed
        row["ItrTime"] = optimized - itr_start
        row["Time"] = optimized - start
        if self._plotting and self._shown is not None:
            # The return of the newest policy the plotter's history recorded meanwhile.
            row.update(self._shown.columns(self.plotter.stats))
            recorder.note_shown(self._shown.points)
        self.history.append(row)

        recorder.record(row)
        recorder.save_snapshot(itr, self.get_itr_snapshot(itr, samples))
        if self._plotting:
            if self._mirror is not None:
                self._mirror.follow(sampler.env_state())
            # Never blocks; the return feeds the live page's learning curve.
            self.plotter.update_plot(self.policy,
                                     iteration=itr,
                                     metrics={"AverageReturn": float(row["AverageReturn"])})
            self._pause_for_plot()

        logger.info("%s", format_table(row))
        done = itr - self.start_itr + 1
        remaining = self.n_itr - itr - 1
        per_itr = (time.perf_counter() - loop_start) / done
        # Numbered as the table's "Iteration" and the videos (iter_0059.mp4): from 0 to the last.
        logger.info("itr %d/%d | AverageReturn %.4g | %.2f s/itr | ETA %s", itr, self.n_itr - 1,
                    row["AverageReturn"], per_itr, format_duration(per_itr * remaining))

    def _env_name(self) -> str:
        if self.env_maker is not None:
            return self.env_maker.label
        return type(self.env).__name__

    def _start_plotter(self,
                       plot_kwargs: Dict[str, Any],
                       video_dir: Optional[str],
                       tensorboard_dir: Optional[str] = None,
                       resumed: Optional[resume.ResumePoint] = None) -> Any:
        # Imported here: the core is needed only when plotting, and it must never be a dependency
        # of training without it.
        from async_plotter import Plotter

        kwargs: Dict[str, Any] = {"max_path_length": self.max_path_length}
        if video_dir is not None:
            kwargs["video_dir"] = video_dir
        if tensorboard_dir is not None:
            kwargs.update(tensorboard_dir=tensorboard_dir, tensorboard_scalars=False)
        kwargs.update(plot_kwargs)
        env = self.env_maker.plotter_env if self.env_maker is not None else self.env
        if isinstance(self.env, gym.Env) and isinstance(self.sampler, SerialSampler):
            # Sampled in this process: the plotter gets the env object training steps, so that
            # its wrappers, and the state they learn, are the ones shown.
            env = self.env
        elif self.env_maker is not None and type(self.sampler).env_state is not Sampler.env_state:
            # The samplers step envs of their own and say what their wrappers learn: the plotter
            # gets a copy that follows it (rl/env_mirror.py). A sampler that does not say (one of
            # the user's) leaves the plot worker its own env, whose statistics learn as it plays.
            self._mirror = EnvMirror.of(self.env_maker, self._env_name())
            env = self._mirror.env if self._mirror is not None else env
        if resumed is not None and isinstance(env, gym.Env):
            # Its first update is the snapshot's policy: shown with what the env had learned.
            resume.give_env_state(env, resumed)
        plotter = None
        try:
            plotter = Plotter(env, self.policy, **kwargs)
            plotter.start()
        except BaseException:
            if plotter is not None:
                plotter.close()
            self._close_mirror()
            raise
        logger.info("plotter started%s", f"; videos go to {video_dir}" if video_dir else "")
        return plotter

    def _pause_for_plot(self) -> None:
        if not self.pause_for_plot:
            return
        if getattr(self.plotter, "window", False) and sys.stdin is not None and sys.stdin.isatty():
            input("Plotting evaluation run: Press Enter to continue...")
        elif not getattr(self, "_pause_ignored_said", False):
            logger.info("pause_for_plot=True is ignored: it waits only while a plot window is "
                        "open and stdin is a terminal")
            self._pause_ignored_said = True

    def _close_mirror(self) -> None:
        mirror, self._mirror = self._mirror, None
        if mirror is not None:
            mirror.close()

    def _close_plotter(self, recorder: Optional[RunRecorder] = None) -> None:
        # Kept after closing: users of rllab and garage read algo.plotter.stats after train().
        plotter, self._plotting = self.plotter, False
        if plotter is None:
            return
        try:
            plotter.close(final_video=self._finished_training)
            shown, self._shown = self._shown, None
            if shown is not None and recorder is not None and self.history:
                # The final policy's, recorded at close(), goes into the last row.
                columns = shown.columns(plotter.stats)
                recorder.note_shown(shown.points)
                if columns[SHOWN_RETURN] is not None:
                    self.history[-1].update(columns)
                    recorder.amend_last(columns)
        finally:
            self._close_mirror()
            stats = getattr(plotter, "stats", None)
            if stats:
                # Plotter.close() already logged the one-line summary of what was shown.
                logger.debug("plotter: %s", ", ".join(f"{k}={v}" for k, v in dict(stats).items()))
