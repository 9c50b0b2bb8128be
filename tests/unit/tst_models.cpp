// Model shapes, the trainer's flat parameter/gradient/buffer storage, and
// TorchScript models from Python (torch).
#include <engine_error.h>
#include <models.h>
#include <python_torch.h>
#include <trainer.h>

#include <QtTest>

#include <torch/torch.h>

using namespace dlion;

class TestModels : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void outputShapes_data();
    void outputShapes();
    void trainerLearnsAndKeepsFlatViews();
    void batchNormBuffersAreFlatViews();
    void scriptModelTrainsThroughFlatViews();
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
        engine::loadScriptModel(path.toStdString(), 1, 28, 28, 10);
    } catch (const engine::EngineError &e) {
        return QString::fromStdString(e.what());
    }
    return {};
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
    QCOMPARE(trainer.model().format(), std::string("torchscript"));
    QVERIFY(!trainer.model().serialized().empty());
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
