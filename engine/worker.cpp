#include "worker.h"

#include "comm.h"
#include "engine_error.h"
#include "link_emulator.h"
#include "rate_meter.h"
#include "strategy.h"
#include "trainer.h"

#include <QLoggingCategory>

#include <torch/utils.h>

#include <chrono>
#include <thread>

Q_LOGGING_CATEGORY(lcEngine, "dlion.engine")

namespace dlion::engine {

namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The per-round agreement: each worker writes its slot, a sum all-reduce
// gives everyone every slot. Flags are agreed when any worker raises them.
class ControlExchange {
public:
    enum Slot { Rate, Samples, Stop, Pause, Merge, Eval, SlotCount };

    explicit ControlExchange(Comm &comm)
        : m_comm(comm), m_stride(SlotCount + comm.world()), m_buf(torch::zeros({comm.world() * m_stride}, torch::kDouble))
    {}

    // `incoming`: this worker's estimates of its incoming links (bytes/s).
    void exchange(const double (&mine)[SlotCount], const std::vector<double> &incoming)
    {
        m_buf.zero_();
        auto *p = m_buf.data_ptr<double>() + m_comm.rank() * m_stride;
        std::copy(std::begin(mine), std::end(mine), p);
        std::copy(incoming.begin(), incoming.end(), p + SlotCount);
        m_comm.allreduceSum(m_buf);
    }
    double at(int worker, Slot s) const { return m_buf.data_ptr<double>()[worker * m_stride + s]; }
    // n x n matrix of link i -> j bandwidth, as measured by receiver j.
    std::vector<double> bandwidth() const
    {
        const int n = m_comm.world();
        std::vector<double> out(std::size_t(n * n), 0.0);
        for (int j = 0; j < n; ++j) {
            for (int i = 0; i < n; ++i)
                out[std::size_t(i * n + j)] = m_buf.data_ptr<double>()[j * m_stride + SlotCount + i];
        }
        return out;
    }
    bool any(Slot s) const
    {
        for (int w = 0; w < m_comm.world(); ++w) {
            if (at(w, s) > 0)
                return true;
        }
        return false;
    }
    double sum(Slot s) const
    {
        double total = 0;
        for (int w = 0; w < m_comm.world(); ++w)
            total += at(w, s);
        return total;
    }

private:
    Comm &m_comm;
    int m_stride;
    torch::Tensor m_buf;
};

} // namespace

Worker::Worker(protocol::JobSpec spec, std::string localHost, WorkerHooks hooks)
    : m_spec(std::move(spec)), m_localHost(std::move(localHost)), m_hooks(std::move(hooks))
{
    m_slowdown = m_spec.slowdownFor(m_spec.rank);
}

Worker::~Worker() = default;

void Worker::setLinkCap(int peer, double mbps)
{
    std::lock_guard lock(m_capMutex);
    m_pendingCaps.emplace_back(peer, mbps);
}

WorkerResult Worker::run()
{
    auto state = [this](const char *s) {
        if (m_hooks.state)
            m_hooks.state(QString::fromLatin1(s));
    };
    const int rank = m_spec.rank;
    const int world = m_spec.world;
    torch::set_num_threads(m_spec.threads);
    if (m_spec.device != QLatin1String("cpu"))
        throw EngineError("device \"" + m_spec.device.toStdString() + "\" is not available: this build of the engine "
                          "uses a CPU-only LibTorch");

    LinkEmulator emulator(m_spec.emulation, world);
    state("loading");
    Trainer trainer(m_spec);
    qCInfo(lcEngine) << "worker" << rank << "holds" << trainer.localTrainSize() << "training samples,"
                     << trainer.parameterCount() << "parameters";

    state("rendezvous");
    Comm::Options co;
    co.rendezvousHost = m_spec.rendezvousHost.toStdString();
    co.rendezvousPort = m_spec.rendezvousPort;
    co.localHost = m_localHost;
    co.rank = rank;
    co.world = world;
    co.timeout = std::chrono::milliseconds(qint64(m_spec.strategyOptions.value("timeout_s").toDouble(60) * 1000));
    Comm comm(co);
    comm.broadcast(trainer.flatParams(), 0);  // identical replicas whatever each initialised
    auto strategy = makeStrategy(m_spec, trainer, comm, emulator);
    ControlExchange control(comm);

    state("running");
    const auto start = Clock::now();
    double pausedS = 0;
    auto elapsed = [&] { return secondsSince(start) - pausedS; };
    RateMeter meter;
    WorkerResult result;
    double lastEvalT = 0;
    double lastScheduleT = -1;
    const auto &budget = m_spec.budget;

    auto evaluate = [&](bool final) {
        const EvalResult local = trainer.evaluate();
        auto sums = torch::tensor({double(local.correct), double(local.count), local.lossSum}, torch::kDouble);
        comm.allreduceSum(sums);
        const auto *s = sums.data_ptr<double>();
        protocol::EvalRecord e;
        e.worker = rank;
        e.round = result.rounds;
        e.t = elapsed();
        e.accuracy = local.accuracy();
        e.loss = local.loss();
        e.globalAccuracy = s[1] > 0 ? s[0] / s[1] : 0;
        e.globalLoss = s[1] > 0 ? s[2] / s[1] : 0;
        e.samples = int(s[1]);
        e.final = final;
        return e;
    };

    auto exchangeControl = [&] {
        double mine[ControlExchange::SlotCount] = {};
        mine[ControlExchange::Rate] = meter.rate();
        mine[ControlExchange::Samples] = double(result.samples);
        mine[ControlExchange::Stop] = m_stop ? 1 : 0;
        mine[ControlExchange::Pause] = m_pause ? 1 : 0;
        mine[ControlExchange::Merge] = m_merge.exchange(false) ? 1 : 0;
        if (rank == 0) {
            const double t = elapsed();
            const bool spent = (budget.seconds > 0 && t >= budget.seconds)
                || (budget.maxRounds > 0 && result.rounds >= budget.maxRounds)
                || (budget.epochs > 0 && control.sum(ControlExchange::Samples) >= budget.epochs * double(trainer.globalTrainSize()));
            if (spent)
                mine[ControlExchange::Stop] = 1;
            mine[ControlExchange::Eval] = t - lastEvalT >= m_spec.evalIntervalS ? 1 : 0;
        }
        control.exchange(mine, strategy->incomingBandwidth());
    };

    // Bounded by the budget, which the job spec guarantees is set.
    for (;;) {
        exchangeControl();
        if (control.any(ControlExchange::Stop))
            break;
        if (control.any(ControlExchange::Pause)) {
            state("paused");
            const auto pauseStart = Clock::now();
            while (control.any(ControlExchange::Pause) && !control.any(ControlExchange::Stop)) {
                std::this_thread::sleep_for(std::chrono::milliseconds(100));
                exchangeControl();
            }
            pausedS += secondsSince(pauseStart);
            state("running");
            continue;
        }
        if (control.at(0, ControlExchange::Eval) > 0) {
            protocol::EvalRecord e = evaluate(false);
            lastEvalT = elapsed();
            // Every worker sees the same global accuracy: stop together,
            // before another step moves the model away from it.
            e.final = budget.targetAccuracy > 0 && e.globalAccuracy >= budget.targetAccuracy;
            if (m_hooks.eval)
                m_hooks.eval(e);
            if (e.final) {
                result.finalEval = e;
                break;
            }
        }

        {
            std::lock_guard lock(m_capMutex);
            for (const auto &[peer, mbps] : m_pendingCaps)
                emulator.setCap(rank, peer, mbps);
            m_pendingCaps.clear();
        }
        double scheduled = 1;
        if (emulator.scheduledSlowdown(rank, lastScheduleT, elapsed(), &scheduled))
            m_slowdown = scheduled;
        lastScheduleT = elapsed();

        protocol::RoundRecord rec;
        rec.worker = rank;
        rec.round = result.rounds;
        RoundContext ctx;
        ctx.round = result.rounds;
        ctx.elapsedS = elapsed();
        ctx.mergeRequested = control.any(ControlExchange::Merge);
        ctx.record = &rec;
        ctx.emitMerge = m_hooks.merge;
        for (int w = 0; w < world; ++w)
            ctx.rates.push_back(control.at(w, ControlExchange::Rate));
        ctx.bandwidth = control.bandwidth();

        const std::int64_t batch = strategy->localBatch(ctx);
        const auto t0 = Clock::now();
        rec.loss = trainer.computeGradient(batch);
        double computeS = secondsSince(t0);
        const double factor = m_slowdown;
        if (factor > 1) {
            // Emulated slower machine: stretch this step to factor x its time.
            std::this_thread::sleep_for(std::chrono::duration<double>((factor - 1) * computeS));
            computeS *= factor;
        }
        meter.add(double(batch), computeS);

        const auto t1 = Clock::now();
        strategy->exchange(trainer.flatGrad(), ctx);
        rec.commS = secondsSince(t1);
        trainer.step();
        const auto t2 = Clock::now();
        strategy->afterStep(ctx);
        rec.commS += secondsSince(t2);

        rec.t = elapsed();
        rec.batch = int(batch);
        rec.share = double(batch) / double(m_spec.batchSize * world);
        rec.rate = meter.rate();
        rec.computeS = computeS;
        rec.slowdown = factor;
        if (m_spec.verifyReplicas)
            rec.paramDigest = trainer.parameterDigest();
        result.samples += batch;
        ++result.rounds;
        if (m_hooks.round)
            m_hooks.round(rec);
    }

    result.stoppedByRequest = m_stop;
    if (!result.finalEval.final) {
        result.finalEval = evaluate(true);
        if (m_hooks.eval)
            m_hooks.eval(result.finalEval);
    }
    result.seconds = elapsed();
    qCInfo(lcEngine) << "worker" << rank << "finished after" << result.rounds << "rounds, accuracy"
                     << result.finalEval.globalAccuracy;
    return result;
}

} // namespace dlion::engine
