// Model shapes, the trainer's flat parameter/gradient/buffer storage, and
// TorchScript models from Python (torch).
#include <engine_error.h>
#include <max_pool.h>
#include <models.h>
#include <python_torch.h>
#include <trainer.h>
#include <worker.h>

#include <QJsonArray>
#include <QJsonDocument>
#include <QTcpServer>
#include <QtTest>

#include <torch/script.h>
#include <torch/torch.h>

#include <array>
#include <atomic>
#include <cmath>
#include <mutex>
#include <sstream>
#include <thread>

using namespace dlion;

class TestModels : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void outputShapes_data();
    void outputShapes();
    void maxPoolMatchesTorch_data();
    void maxPoolMatchesTorch();
    void trainerLearnsAndKeepsFlatViews();
    void batchNormBuffersAreFlatViews();
    void trialStepLeavesTheReplicaAsItWas();
    void scriptModelTrainsThroughFlatViews();
    void builtinModelsAsTorchScript_data();
    void builtinModelsAsTorchScript();
    void cnnTorchScriptRunsInPython();
    void scriptModelTakesTabularRows();
    void regroupGivesEveryReplicaTheSourcesBuffers();
    void badModelFilesNameTheFile();
};

namespace {

protocol::JobSpec syntheticJob(const QString &model)
{
    protocol::JobSpec spec;
    spec.dataset = "synthetic";
    spec.model = model;
    spec.lr = 0.05;
    return spec;
}

// The message loadScriptModel throws for `path` (28x28 grey, 10 classes).
QString loadError(const QString &path)
{
    try {
        engine::loadScriptModel(path.toStdString(), {1, 28, 28}, 10);
    } catch (const engine::EngineError &e) {
        return QString::fromStdString(e.what());
    }
    return {};
}

// `model` with running statistics of its own: a few training forwards.
void warmUp(engine::Model &model, const std::vector<std::int64_t> &input)
{
    torch::NoGradGuard noGrad;
    model.train();
    for (int i = 0; i < 3; ++i)
        model.forward(torch::randn(input) * 2 + 1);
}

double maxDiff(const torch::Tensor &a, const torch::Tensor &b)
{
    return (a - b).abs().max().item<double>();
}

} // namespace

void TestModels::outputShapes_data()
{
    QTest::addColumn<QString>("name");
    QTest::addColumn<int>("channels");
    QTest::addColumn<int>("size");
    for (const char *m : {"mlp", "lenet5", "cnn"}) {
        QTest::newRow(qPrintable(QString("%1 28x28x1").arg(m))) << QString(m) << 1 << 28;
        QTest::newRow(qPrintable(QString("%1 32x32x3").arg(m))) << QString(m) << 3 << 32;
    }
}

void TestModels::outputShapes()
{
    QFETCH(QString, name);
    QFETCH(int, channels);
    QFETCH(int, size);
    auto model = engine::makeModel(name.toStdString(), channels, size, size, 10);
    const auto out = model->forward(torch::randn({5, channels, size, size}));
    QCOMPARE(out.sizes().vec(), (std::vector<std::int64_t>{5, 10}));
}

void TestModels::maxPoolMatchesTorch_data()
{
    QTest::addColumn<QList<int>>("shape");
    QTest::addColumn<int>("threads");
    QTest::newRow("LeNet-5's first layer") << QList<int>{32, 6, 28, 28} << 1;
    QTest::newRow("odd edges") << QList<int>{3, 5, 7, 9} << 1;
    QTest::newRow("two threads") << QList<int>{32, 16, 10, 10} << 2;
}

// The engine's 2x2 pooling against torch's, bit for bit, forward and
// backward: ReLU's zeros tie whole windows, and NaN, infinities and
// negative-zero gradients must come out where torch puts them.
void TestModels::maxPoolMatchesTorch()
{
    QFETCH(QList<int>, shape);
    QFETCH(int, threads);
    const int before = torch::get_num_threads();
    torch::set_num_threads(threads);
    torch::manual_seed(3);
    auto x = torch::relu(torch::randn({shape[0], shape[1], shape[2], shape[3]}));
    auto flat = x.view({-1});
    flat.index_put_({0}, std::nanf(""));
    flat.index_put_({3}, std::nanf(""));
    flat.index_put_({5}, -INFINITY);
    flat.index_put_({10}, INFINITY);
    flat.narrow(0, 20, 8).fill_(-1.5f);  // a row of ties below zero
    auto theirs = x.clone().requires_grad_(true), ours = x.clone().requires_grad_(true);
    const auto a = torch::nn::functional::max_pool2d(theirs, torch::nn::functional::MaxPool2dFuncOptions(2));
    const auto b = engine::maxPool2x2(ours);
    auto grad = torch::randn(a.sizes());
    grad.view({-1}).index_put_({1}, -0.f);
    a.backward(grad);
    b.backward(grad);
    torch::set_num_threads(before);
    QCOMPARE(b.sizes().vec(), a.sizes().vec());
    const auto sameBits = [](const torch::Tensor &p, const torch::Tensor &q) {
        return torch::equal(p.contiguous().view(torch::kInt), q.contiguous().view(torch::kInt));
    };
    QVERIFY(sameBits(a, b));
    QVERIFY(sameBits(theirs.grad(), ours.grad()));
    // Other dtypes take torch's own path.
    const auto d = torch::randn({2, 3, 6, 6}, torch::kDouble);
    QVERIFY(torch::equal(engine::maxPool2x2(d), torch::nn::functional::max_pool2d(d, torch::nn::functional::MaxPool2dFuncOptions(2))));
}

void TestModels::trainerLearnsAndKeepsFlatViews()
{
    engine::Trainer trainer(syntheticJob("mlp"));
    QCOMPARE(trainer.parameterCount(), trainer.flatParams().numel());
    const auto before = trainer.evaluate();
    const std::uint64_t digest = trainer.parameterDigest();
    double first = 0, last = 0;
    for (int i = 0; i < 150; ++i) {
        const double loss = trainer.computeGradient(32);
        QVERIFY(trainer.flatGrad().abs().sum().item<double>() > 0);  // backward wrote into the flat buffer
        trainer.step();
        (i < 10 ? first : last) += loss;
    }
    QVERIFY(trainer.parameterDigest() != digest);  // the step moved the flat buffer
    QVERIFY2(last / 140 < first / 10, "loss must fall");
    const auto after = trainer.evaluate();
    QVERIFY2(after.accuracy() > before.accuracy() + 0.3, qPrintable(QString::number(after.accuracy())));
    // Writing the flat buffer is writing the model.
    trainer.flatParams().zero_();
    for (const auto &p : trainer.model().parameters())
        QCOMPARE(p.abs().sum().item<double>(), 0.0);
}

void TestModels::batchNormBuffersAreFlatViews()
{
    engine::Trainer trainer(syntheticJob("cnn"));
    // Running mean and variance of six BatchNorm2d layers (32, 32, 64, 64, 128, 128 channels).
    QCOMPARE(trainer.bufferCount(), 2 * (2 * 32 + 2 * 64 + 2 * 128));
    QCOMPARE(trainer.stateCount(), trainer.parameterCount() + trainer.bufferCount());
    const auto before = trainer.flatBuffers().clone();
    trainer.computeGradient(8);  // a training forward updates the running statistics in place
    QVERIFY(!trainer.flatBuffers().equal(before));
    trainer.flatBuffers().fill_(0.5);
    for (const auto &b : trainer.model().buffers()) {
        if (b.is_floating_point())
            QCOMPARE(b.mean().item<double>(), 0.5);
    }
}

void TestModels::trialStepLeavesTheReplicaAsItWas()
{
    // The pacer times trial steps of a slowed worker mid-run: two replicas
    // of one seed, one of them timed, must go on training alike.
    engine::Trainer timed(syntheticJob("cnn")), plain(syntheticJob("cnn"));
    timed.computeGradient(8);
    timed.step();
    plain.computeGradient(8);
    plain.step();
    const auto buffers = timed.flatBuffers().clone();
    timed.trialStep(16);
    QVERIFY(timed.flatBuffers().equal(buffers));  // running statistics restored
    QCOMPARE(timed.flatGrad().abs().sum().item<double>(), 0.0);
    QCOMPARE(timed.computeGradient(8), plain.computeGradient(8));  // the same next batch, the same model
    QVERIFY(timed.flatGrad().equal(plain.flatGrad()));
}

void TestModels::scriptModelTrainsThroughFlatViews()
{
    if (test::pythonWithTorch().isEmpty())
        QSKIP("/usr/bin/python3 has no torch");
    QTemporaryDir dir;
    QString error;
    const QString path = test::exportExampleModel(dir.path(), {}, &error);
    QVERIFY2(!path.isEmpty(), qPrintable(error));
    engine::Trainer trainer(syntheticJob(path));
    QVERIFY(trainer.bufferCount() > 0);  // its BatchNorm statistics
    const auto before = trainer.evaluate();
    for (int i = 0; i < 60; ++i) {
        trainer.computeGradient(32);
        QVERIFY(trainer.flatGrad().abs().sum().item<double>() > 0);  // backward through the script reached the flat buffer
        trainer.step();
    }
    const auto after = trainer.evaluate();
    QVERIFY2(after.accuracy() > before.accuracy() + 0.3, qPrintable(QString::number(after.accuracy())));
    trainer.flatParams().zero_();
    for (const auto &p : trainer.model().parameters())
        QCOMPARE(p.abs().sum().item<double>(), 0.0);
    QVERIFY(trainer.model().stateDict().empty());  // a TorchScript model is its module
    QVERIFY(!trainer.model().torchScript().empty());
}

void TestModels::builtinModelsAsTorchScript_data()
{
    QTest::addColumn<QString>("name");
    QTest::addColumn<int>("channels");
    QTest::addColumn<int>("size");
    QTest::newRow("mlp") << "mlp" << 1 << 28;
    QTest::newRow("lenet5") << "lenet5" << 1 << 28;
    QTest::newRow("cnn") << "cnn" << 3 << 32;
}

void TestModels::builtinModelsAsTorchScript()
{
    // A built-in model translated into TorchScript computes what the
    // LibTorch model computes, in eval and in training mode (batch
    // statistics, and the same running statistics after it), under the
    // same parameter and buffer names.
    QFETCH(QString, name);
    QFETCH(int, channels);
    QFETCH(int, size);
    torch::manual_seed(3);
    auto model = engine::makeModel(name.toStdString(), channels, size, size, 10);
    const std::vector<std::int64_t> input{16, channels, size, size};
    warmUp(*model, input);
    std::istringstream file(model->torchScript());
    torch::jit::Module script = torch::jit::load(file);
    torch::NoGradGuard noGrad;
    const auto x = torch::randn(input);
    model->eval();
    script.eval();
    const double evalDiff = maxDiff(model->forward(x), script.forward({x}).toTensor());
    QVERIFY2(evalDiff < 1e-5, qPrintable(QString::number(evalDiff)));
    model->train();
    script.train();
    const double trainDiff = maxDiff(model->forward(x), script.forward({x}).toTensor());
    QVERIFY2(trainDiff < 1e-5, qPrintable(QString::number(trainDiff)));
    std::map<std::string, torch::Tensor> mine, theirs;
    for (const auto &p : model->named_parameters())
        mine[p.key()] = p.value();
    for (const auto &b : model->named_buffers())
        mine[b.key()] = b.value();
    for (const auto &p : script.named_parameters())
        theirs[p.name] = p.value;
    for (const auto &b : script.named_buffers())
        theirs[b.name] = b.value;
    QCOMPARE(theirs.size(), mine.size());
    for (const auto &[key, t] : mine) {
        QVERIFY2(theirs.count(key), key.c_str());
        QVERIFY2(maxDiff(t.to(torch::kDouble), theirs[key].to(torch::kDouble)) < 1e-6, key.c_str());
    }
}

void TestModels::cnnTorchScriptRunsInPython()
{
    // The cnn (BatchNorm) as Python's torch.jit.load gets it: the same
    // logits in eval mode, and its state_dict file (torch.load) has the
    // module's keys and loads into it.
    if (test::pythonWithTorch().isEmpty())
        QSKIP("/usr/bin/python3 has no torch");
    torch::manual_seed(4);
    auto model = engine::makeModel("cnn", 3, 32, 32, 10);
    const std::vector<std::int64_t> input{8, 3, 32, 32};
    warmUp(*model, input);
    QTemporaryDir dir;
    auto save = [&](const QString &name, const std::string &bytes) {
        QFile f(dir.filePath(name));
        return f.open(QIODevice::WriteOnly) && f.write(bytes.data(), qint64(bytes.size())) == qint64(bytes.size());
    };
    const auto x = torch::randn(input);
    QVERIFY(save("model.pt", model->torchScript()));
    QVERIFY(save("state.pt", model->stateDict()));
    QVERIFY(save("x.f32", std::string(static_cast<const char *>(x.data_ptr()), std::size_t(x.numel()) * sizeof(float))));
    QString error;
    const auto out = test::runPython(
        {"-c", QStringLiteral("import json, numpy, torch\n"
                              "m = torch.jit.load('%1/model.pt')\n"
                              "state = torch.load('%1/state.pt')\n"
                              "assert sorted(state) == sorted(m.state_dict()), (sorted(state), sorted(m.state_dict()))\n"
                              "m.load_state_dict(state)\n"
                              "m.eval()\n"
                              "x = torch.from_numpy(numpy.fromfile('%1/x.f32', dtype=numpy.float32).reshape(8, 3, 32, 32))\n"
                              "with torch.no_grad():\n"
                              "    print(json.dumps(m(x).flatten().tolist()))\n")
                   .arg(dir.path())},
        &error);
    QVERIFY2(out, qPrintable(error));
    const QJsonArray logits = QJsonDocument::fromJson(*out).array();
    torch::NoGradGuard noGrad;
    model->eval();
    const auto want = model->forward(x).flatten();
    QCOMPARE(logits.size(), qsizetype(want.numel()));
    double diff = 0;
    for (qsizetype i = 0; i < logits.size(); ++i)
        diff = std::max(diff, std::abs(logits[i].toDouble() - want[i].item<double>()));
    QVERIFY2(diff < 1e-5, qPrintable(QString::number(diff)));
}

void TestModels::scriptModelTakesTabularRows()
{
    // Tabular samples, stored as (N, 1, 1, F), reach a TorchScript module
    // as (N, F); a module for another number of features is refused.
    if (test::pythonWithTorch().isEmpty())
        QSKIP("/usr/bin/python3 has no torch");
    QTemporaryDir dir;
    const QString path = dir.filePath("rows.pt");
    QString error;
    QVERIFY2(test::runPython({"-c", QStringLiteral("import torch\ntorch.jit.script(torch.nn.Linear(4, 3)).save('%1')").arg(path)},
                             &error),
             qPrintable(error));
    const auto model = engine::makeModel(path.toStdString(), 1, 1, 4, 3);
    QCOMPARE(model->forward(torch::randn({5, 1, 1, 4})).sizes().vec(), (std::vector<std::int64_t>{5, 3}));
    try {
        engine::makeModel(path.toStdString(), 1, 1, 6, 3);
        QFAIL("a module for 4 features took 6");
    } catch (const engine::EngineError &e) {
        const QString message = QString::fromStdString(e.what());
        QVERIFY2(message.contains(path + ": does not take the dataset's input of shape (2, 6) (tabular data: a row of float "
                                         "features per sample)"),
                 qPrintable(message));
    }
}

void TestModels::regroupGivesEveryReplicaTheSourcesBuffers()
{
    // Two workers (threads, loopback Gloo) train the cnn under all-reduce:
    // identical parameters, but each replica's own BatchNorm statistics
    // (no evaluation averages them here). Paused, they re-form their group
    // with worker 1 as the source (Worker::joinGroup, the path of a group
    // re-formed after a loss or for a rejoin) and are stopped before
    // another round: the final evaluation scores each replica before
    // averaging, and the losses agree only if worker 1's buffers reached
    // worker 0.
    QTcpServer first, second;
    QVERIFY(first.listen(QHostAddress::LocalHost, 0) && second.listen(QHostAddress::LocalHost, 0));
    const int ports[2] = {first.serverPort(), second.serverPort()};
    first.close();
    second.close();
    std::array<std::atomic<int>, 2> rounds{}, pauses{};
    std::array<protocol::EvalRecord, 2> finals;
    std::array<std::unique_ptr<engine::Worker>, 2> workers;
    for (int r = 0; r < 2; ++r) {
        protocol::JobSpec spec = syntheticJob("cnn");
        spec.strategy = "allreduce";
        spec.batchSize = 16;
        spec.evalSamples = 300;
        spec.evalIntervalS = 1e6;
        spec.budget.seconds = 300;  // a bound: the test stops them
        spec.strategyOptions = QJsonObject{{"timeout_s", 30}};
        spec.world = 2;
        spec.rank = r;
        spec.rendezvousPort = ports[0];
        engine::WorkerHooks hooks;
        hooks.round = [&rounds, r](const protocol::RoundRecord &) { ++rounds[r]; };
        hooks.state = [&pauses, r](protocol::WorkerState s) { pauses[r] += s == protocol::WorkerState::Paused ? 1 : 0; };
        hooks.eval = [&finals, r](const protocol::EvalRecord &e) {
            if (e.final)
                finals[r] = e;
        };
        workers[r] = std::make_unique<engine::Worker>(spec, "127.0.0.1", QByteArray("a test run secret of 32 bytes.."), hooks);
    }
    std::string error;
    std::mutex errorMutex;
    std::array<std::thread, 2> threads;
    for (int r = 0; r < 2; ++r) {
        threads[r] = std::thread([&, r] {
            try {
                workers[r]->run();
            } catch (const std::exception &e) {
                std::lock_guard lock(errorMutex);
                error = e.what();
            }
        });
    }
    auto stopAll = qScopeGuard([&] {
        for (int r = 0; r < 2; ++r) {
            workers[r]->requestStop();
            threads[r].join();
        }
    });
    QTRY_VERIFY_WITH_TIMEOUT(rounds[0] >= 5 && rounds[1] >= 5, 120000);
    for (auto &w : workers)
        w->setPaused(true);
    QTRY_VERIFY_WITH_TIMEOUT(pauses[0] == 1 && pauses[1] == 1, 30000);
    protocol::GroupPlan plan;
    plan.generation = 1;
    plan.members = {0, 1};
    plan.source = 1;
    plan.rendezvousHost = "127.0.0.1";
    plan.rendezvousPort = ports[1];
    const int before = rounds[0];
    for (auto &w : workers)
        w->requestRegroup(plan);
    QTRY_VERIFY_WITH_TIMEOUT(pauses[0] == 2 && pauses[1] == 2, 60000);  // paused again, in the new group
    stopAll.dismiss();
    for (int r = 0; r < 2; ++r) {
        workers[r]->requestStop();
        threads[r].join();
    }
    QVERIFY2(error.empty(), error.c_str());
    QCOMPARE(rounds[0].load(), before);  // no round between the regroup and the evaluation
    QVERIFY(finals[0].final && finals[1].final);
    QVERIFY(finals[0].loss > 0);
    QVERIFY2(std::abs(finals[0].loss - finals[1].loss) <= 1e-9 * finals[0].loss,
             qPrintable(QString("replica losses %1 and %2").arg(finals[0].loss, 0, 'g', 17).arg(finals[1].loss, 0, 'g', 17)));
}

void TestModels::badModelFilesNameTheFile()
{
    QTemporaryDir dir;
    const QString missing = dir.filePath("missing.pt");
    QVERIFY2(loadError(missing).contains(missing + ": no such file"), qPrintable(loadError(missing)));
    const QString text = dir.filePath("notes.pt");
    QFile f(text);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write("not a model\n");
    f.close();
    QVERIFY2(loadError(text).contains(text + ": not a TorchScript module"), qPrintable(loadError(text)));
    if (test::pythonWithTorch().isEmpty())
        QSKIP("/usr/bin/python3 has no torch: the modules with a wrong shape or no parameters are not made");
    const QString empty = dir.filePath("empty.pt");
    QString error;
    const QString colour = test::exportExampleModel(dir.path(), {"--channels", "3"}, &error);
    QVERIFY2(!colour.isEmpty(), qPrintable(error));
    QVERIFY2(test::runPython({"-c", QStringLiteral("import torch\nclass M(torch.nn.Module):\n"
                                                   "    def forward(self, x):\n        return x.flatten(1)[:, :10]\n"
                                                   "torch.jit.trace(M(), torch.zeros(2, 1, 28, 28)).save('%1')").arg(empty)},
                             &error),
             qPrintable(error));
    QVERIFY2(loadError(colour).contains(colour + ": does not take the dataset's input of shape (2, 1, 28, 28)"),
             qPrintable(loadError(colour)));
    QVERIFY2(loadError(empty).contains(empty + ": the module has no parameters"), qPrintable(loadError(empty)));
}

QTEST_GUILESS_MAIN(TestModels)
#include "tst_models.moc"
