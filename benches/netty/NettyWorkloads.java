import io.netty.util.HashedWheelTimer;
import io.netty.util.Timeout;
import io.netty.util.TimerTask;

import java.lang.management.ManagementFactory;
import java.util.Arrays;
import java.util.Locale;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Netty's HashedWheelTimer on the workloads of {@code benches/netty_workloads.rs}, with the same
 * parameters and the same output lines ({@code RESULT impl=netty workload=W metric=M value=V}),
 * so that running both on one machine gives ratios. {@code benches/README.md} defines each
 * workload; {@code benches/netty/run} builds and runs this file.
 *
 * <p>System properties: {@code -Dn} (1 000 000), {@code -Dreps} (5), {@code -Dthreads} (2,
 * multi_producer), {@code -Didle_s} (5, idle and held), {@code -Drates} (5,10,15,20,25,30,40,
 * millions of timeouts a second), {@code -Dlead_ms} (2 500) and {@code -Dinterleave} (1), for
 * expire_rate.
 */
public final class NettyWorkloads {
    private static final int N = Integer.getInteger("n", 1_000_000);
    private static final int REPS = Integer.getInteger("reps", 5);
    private static final int THREADS = Integer.getInteger("threads", 2);
    private static final int IDLE_S = Integer.getInteger("idle_s", 5);
    private static final String RATES = System.getProperty("rates", "5,10,15,20,25,30,40");
    private static final long LEAD_NS =
            TimeUnit.MILLISECONDS.toNanos(Long.getLong("lead_ms", 2500));
    /** expire_rate: how many ticks' worth of deadlines the schedule deals out in turn. */
    private static final long INTERLEAVE = Math.max(1, Long.getLong("interleave", 1));
    /** The p99 lateness (ms) up to which expire_rate counts a rate as sustained: 2.5 ticks. */
    private static final double SUSTAINED_P99_MS = 2.5;
    private static final long HOUR_NS = TimeUnit.HOURS.toNanos(1);
    private static final long SECOND_NS = TimeUnit.SECONDS.toNanos(1);

    private static final TimerTask NOOP = timeout -> { };
    /** Where the capturing tasks add their id. */
    private static final AtomicLong SINK = new AtomicLong();

    private NettyWorkloads() { }

    public static void main(String[] args) throws Exception {
        String only = args.length > 0 ? args[0] : "all";
        String[] known = {"schedule", "schedule_capture", "schedule_cancel", "multi_producer",
            "expire", "memory", "expire_rate", "memory_capture", "idle", "held"};
        if (!only.equals("all") && !Arrays.asList(known).contains(only)) {
            System.err.println("unknown workload " + only + "; one of: all "
                    + String.join(" ", known));
            System.exit(2);
        }
        for (String workload : known) {
            if (only.equals("all") || only.equals(workload)) {
                run(workload);
            }
        }
    }

    private static void run(String workload) throws Exception {
        switch (workload) {
            case "schedule" -> {
                schedule();
                double[] ns = new double[REPS];
                for (int r = 0; r < REPS; r++) ns[r] = schedule();
                print(workload, "ns_per_op", median(ns));
            }
            case "schedule_capture" -> {
                scheduleCapture();
                double[] ns = new double[REPS];
                for (int r = 0; r < REPS; r++) ns[r] = scheduleCapture();
                print(workload, "ns_per_op", median(ns));
            }
            case "schedule_cancel" -> {
                scheduleCancel();
                double[][] runs = new double[REPS][];
                for (int r = 0; r < REPS; r++) runs[r] = scheduleCancel();
                print(workload, "ns_per_op", median(column(runs, 0)));
                print(workload, "drain_ms", median(column(runs, 1)));
            }
            case "multi_producer" -> {
                multiProducer();
                double[] ns = new double[REPS];
                for (int r = 0; r < REPS; r++) ns[r] = multiProducer();
                print(workload, "ns_per_op", median(ns));
            }
            case "expire" -> {
                expire();
                double[][] runs = new double[3][];
                for (int r = 0; r < runs.length; r++) runs[r] = expire();
                String[] metrics = {"lag_ms", "late_p50_ms", "late_p99_ms", "late_max_ms"};
                for (int m = 0; m < metrics.length; m++) {
                    print(workload, metrics[m], median(column(runs, m)));
                }
            }
            case "memory" -> print(workload, "bytes_per_timeout", memory(false));
            case "memory_capture" -> print(workload, "bytes_per_timeout", memory(true));
            case "expire_rate" -> expireRateSweep();
            case "idle" -> print(workload, "cpu_ms_per_s", idle());
            case "held" -> print(workload, "cpu_ms_per_s", held());
            default -> throw new IllegalArgumentException(workload);
        }
    }

    // ---------------------------------------------------------------------------------------
    // The workloads. Each builds its own timer and stops it before returning.

    /** 1 ms tick, 512 buckets, a daemon worker thread named "wheel", no leak detection. */
    private static HashedWheelTimer newTimer() {
        return new HashedWheelTimer(task -> {
            Thread thread = new Thread(task, "wheel");
            thread.setDaemon(true);
            return thread;
        }, 1, TimeUnit.MILLISECONDS, 512, false);
    }

    /** {@link #newTimer}, its worker started outside any timed loop by a timeout an hour away. */
    private static HashedWheelTimer startedTimer() {
        HashedWheelTimer timer = newTimer();
        timer.newTimeout(NOOP, 1, TimeUnit.HOURS);
        return timer;
    }

    /** 30 s and up: no timeout of the scheduling workloads fires. */
    private static long farDelayMs(int i) {
        return 30_000 + (i & 1023);
    }

    /** N newTimeouts on one thread, the handles ignored. Nanoseconds per call. */
    private static double schedule() {
        HashedWheelTimer timer = startedTimer();
        long start = System.nanoTime();
        for (int i = 0; i < N; i++) {
            timer.newTimeout(NOOP, farDelayMs(i), TimeUnit.MILLISECONDS);
        }
        long elapsed = System.nanoTime() - start;
        timer.stop();
        return (double) elapsed / N;
    }

    /** As schedule, each task a lambda holding its id (the sink is a static field). */
    private static double scheduleCapture() {
        HashedWheelTimer timer = startedTimer();
        long start = System.nanoTime();
        for (int i = 0; i < N; i++) {
            long id = i;
            timer.newTimeout(timeout -> SINK.addAndGet(id), farDelayMs(i), TimeUnit.MILLISECONDS);
        }
        long elapsed = System.nanoTime() - start;
        timer.stop();
        return (double) elapsed / N;
    }

    /**
     * N times newTimeout then cancel, then spinning until pending is back to 1 (the hour-away
     * timeout). {ns per pair, drain ms}.
     */
    private static double[] scheduleCancel() {
        HashedWheelTimer timer = startedTimer();
        long start = System.nanoTime();
        for (int i = 0; i < N; i++) {
            Timeout timeout = timer.newTimeout(NOOP, farDelayMs(i), TimeUnit.MILLISECONDS);
            timeout.cancel();
        }
        long scheduled = System.nanoTime();
        while (timer.pendingTimeouts() > 1) {
            Thread.onSpinWait();
        }
        long drained = System.nanoTime();
        timer.stop();
        return new double[] {(double) (scheduled - start) / N, (drained - scheduled) / 1e6};
    }

    /**
     * THREADS threads, N / THREADS newTimeout + cancel pairs each, released at once. ns per pair,
     * all threads together (wall time from the release to the last join).
     */
    private static double multiProducer() throws InterruptedException {
        HashedWheelTimer timer = startedTimer();
        int each = N / THREADS;
        CountDownLatch release = new CountDownLatch(1);
        Thread[] producers = new Thread[THREADS];
        for (int k = 0; k < THREADS; k++) {
            producers[k] = new Thread(() -> {
                try {
                    release.await();
                } catch (InterruptedException e) {
                    return;
                }
                for (int i = 0; i < each; i++) {
                    timer.newTimeout(NOOP, farDelayMs(i), TimeUnit.MILLISECONDS).cancel();
                }
            });
            producers[k].start();
        }
        long start = System.nanoTime();
        release.countDown();
        for (Thread producer : producers) {
            producer.join();
        }
        long elapsed = System.nanoTime() - start;
        timer.stop();
        return (double) elapsed / ((long) each * THREADS);
    }

    /** Records, per timeout, how late its task ran; releases a latch when all have. */
    private static final class Lateness {
        final long[] late;
        final AtomicLong ran = new AtomicLong();
        final CountDownLatch all = new CountDownLatch(1);

        Lateness(int n) {
            late = new long[n];
        }

        TimerTask task(int index, long dueNanoTime) {
            return timeout -> record(index, dueNanoTime);
        }

        /** Timeout {@code index}, due at {@code dueNanoTime}, has run now. */
        void record(int index, long dueNanoTime) {
            late[index] = System.nanoTime() - dueNanoTime;
            if (ran.incrementAndGet() == late.length) {
                all.countDown();
            }
        }

        /** The lateness of rank q (0 to 1) in ms: sorted[(int) (n * q)]. */
        static double rankMs(long[] sorted, double q) {
            return sorted[(int) (sorted.length * q)] / 1e6;
        }
    }

    /**
     * N timeouts due evenly over [100, 200) ms after a base instant, each delay computed at its
     * call. {ms from the last deadline (200 ms) until every task ran, p50, p99, max lateness ms}.
     */
    private static double[] expire() throws InterruptedException {
        HashedWheelTimer timer = startedTimer();
        Lateness lateness = new Lateness(N);
        long base = System.nanoTime();
        for (int i = 0; i < N; i++) {
            long offset = TimeUnit.MILLISECONDS.toNanos(100) + (long) i * 100_000_000L / N;
            timer.newTimeout(lateness.task(i, base + offset), offset - (System.nanoTime() - base),
                    TimeUnit.NANOSECONDS);
        }
        lateness.all.await();
        long end = System.nanoTime();
        timer.stop();
        long[] sorted = lateness.late.clone();
        Arrays.sort(sorted);
        double lastDue = base + TimeUnit.MILLISECONDS.toNanos(200);
        return new double[] {
            (end - lastDue) / 1e6,
            Lateness.rankMs(sorted, 0.5),
            Lateness.rankMs(sorted, 0.99),
            sorted[sorted.length - 1] / 1e6,
        };
    }

    /**
     * expire_rate at n timeouts: all scheduled before the first deadline, LEAD_NS after the base;
     * deadlines evenly over the 100 ms from there. {p99 lateness ms, ms after the first deadline
     * when the scheduling loop ended (negative: before)}.
     */
    private static double[] expireRate(int n) throws InterruptedException {
        HashedWheelTimer timer = startedTimer();
        Lateness lateness = new Lateness(n);
        long base = System.nanoTime();
        for (int i = 0; i < n; i++) {
            long rank = (i % INTERLEAVE) * ((n + INTERLEAVE - 1) / INTERLEAVE) + i / INTERLEAVE;
            long due = base + LEAD_NS + rank * 100_000_000L / n;
            timer.newTimeout(lateness.task(i, due), due - System.nanoTime(), TimeUnit.NANOSECONDS);
        }
        double scheduledMs = (System.nanoTime() - base - LEAD_NS) / 1e6;
        lateness.all.await();
        timer.stop();
        long[] sorted = lateness.late.clone();
        Arrays.sort(sorted);
        return new double[] {Lateness.rankMs(sorted, 0.99), scheduledMs};
    }

    /**
     * For each rate R of RATES (millions a second), R x 100 ms timeouts: a warm-up, then 3 runs;
     * per rate the median p99 and the latest end of scheduling; then the highest rate whose
     * median p99 is within SUSTAINED_P99_MS, in timeouts a second.
     */
    private static void expireRateSweep() throws InterruptedException {
        double capacity = 0;
        int largest = 0;
        for (String text : RATES.split(",")) {
            int perSecond = (int) (Double.parseDouble(text) * 1_000_000);
            largest = Math.max(largest, perSecond);
            int n = perSecond / 10;
            expireRate(n);
            double[][] runs = new double[3][];
            for (int r = 0; r < runs.length; r++) runs[r] = expireRate(n);
            double p99 = median(column(runs, 0));
            double scheduled = Arrays.stream(column(runs, 1)).max().getAsDouble();
            String millions = perSecond % 1_000_000 == 0
                    ? Integer.toString(perSecond / 1_000_000)
                    : Double.toString(perSecond / 1e6);
            String workload = "expire_rate_" + millions + "M";
            print(workload, "late_p99_ms", p99);
            print(workload, "scheduled_after_first_deadline_ms", scheduled);
            if (p99 <= SUSTAINED_P99_MS) {
                capacity = Math.max(capacity, perSecond);
            }
        }
        print("expire_rate", "capacity_per_s", capacity);
        double floor = taskOnlyNs(largest / 10);
        print("expire_rate", "task_only_ns", floor);
        print("expire_rate", "task_only_rate_per_s", 1e9 / floor);
    }

    /**
     * The expire task's own cost, in ns a call: {@code Lateness.record} (a clock read, a store, a
     * locked add) called n times in a row on this thread, with no timer, after a first pass for
     * the JIT. A timer that runs its tasks on one thread sustains at most 1e9 / task_only_ns of
     * them a second: the ceiling for capacity_per_s, as on the crate's side.
     */
    private static double taskOnlyNs(int n) {
        double ns = 0;
        for (int pass = 0; pass < 2; pass++) {
            Lateness lateness = new Lateness(n);
            long start = System.nanoTime();
            for (int i = 0; i < n; i++) {
                lateness.record(i, 0);
            }
            ns = (double) (System.nanoTime() - start) / n;
        }
        return ns;
    }

    /**
     * Heap in use after N pending timeouts minus before, per timeout, each side after three GCs;
     * the worker gets 200 ms to move them into buckets. The no-op task, or (capture) a lambda
     * holding a long id and a reference to the sink.
     */
    private static double memory(boolean capture) throws InterruptedException {
        HashedWheelTimer timer = startedTimer();
        long before = heapInUse();
        AtomicLong sink = SINK;
        for (int i = 0; i < N; i++) {
            long id = i;
            TimerTask task = capture ? timeout -> sink.addAndGet(id) : NOOP;
            timer.newTimeout(task, farDelayMs(i), TimeUnit.MILLISECONDS);
        }
        Thread.sleep(200);
        long after = heapInUse();
        timer.stop();
        return (double) (after - before) / N;
    }

    private static long heapInUse() throws InterruptedException {
        Runtime runtime = Runtime.getRuntime();
        for (int k = 0; k < 3; k++) {
            System.gc();
            Thread.sleep(50);
        }
        return runtime.totalMemory() - runtime.freeMemory();
    }

    /** Process CPU ms per second over IDLE_S s with only the hour-away timeout, after 200 ms. */
    private static double idle() throws InterruptedException {
        HashedWheelTimer timer = startedTimer();
        Thread.sleep(200);
        double cpu = cpuMsPerSecond(IDLE_S);
        timer.stop();
        return cpu;
    }

    /**
     * N timeouts due evenly over [1 s, 1 h) (timeout i at 1 s + (1 h - 1 s) / N * i): idle
     * connections, a few hundred firing a second. Process CPU ms per second over IDLE_S s, from
     * 2 s after scheduling. No hour-away timeout.
     */
    private static double held() throws InterruptedException {
        HashedWheelTimer timer = newTimer();
        long step = (HOUR_NS - SECOND_NS) / N;
        for (int i = 0; i < N; i++) {
            timer.newTimeout(NOOP, SECOND_NS + step * i, TimeUnit.NANOSECONDS);
        }
        Thread.sleep(2000);
        double cpu = cpuMsPerSecond(IDLE_S);
        timer.stop();
        return cpu;
    }

    /** The process's CPU time (all threads) over the next `seconds`, in ms per second. */
    private static double cpuMsPerSecond(int seconds) throws InterruptedException {
        var os = (com.sun.management.OperatingSystemMXBean)
                ManagementFactory.getOperatingSystemMXBean();
        long before = os.getProcessCpuTime();
        Thread.sleep(TimeUnit.SECONDS.toMillis(seconds));
        long after = os.getProcessCpuTime();
        return (after - before) / 1e6 / seconds;
    }

    // ---------------------------------------------------------------------------------------
    // Figures

    private static void print(String workload, String metric, double value) {
        System.out.println(String.format(Locale.ROOT,
                "RESULT impl=netty workload=%s metric=%s value=%.3f", workload, metric, value));
    }

    /** The upper median: sorted[length / 2], as the Rust harness. */
    private static double median(double[] values) {
        double[] sorted = values.clone();
        Arrays.sort(sorted);
        return sorted[sorted.length / 2];
    }

    private static double[] column(double[][] runs, int k) {
        double[] values = new double[runs.length];
        for (int r = 0; r < runs.length; r++) values[r] = runs[r][k];
        return values;
    }
}
