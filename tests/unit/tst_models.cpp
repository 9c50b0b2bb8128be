// Model shapes and the trainer's flat parameter/gradient buffers (torch).
#include <models.h>
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
};

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
    protocol::JobSpec spec;
    spec.dataset = "synthetic";
    spec.model = "mlp";
    spec.lr = 0.05;
    engine::Trainer trainer(spec);
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

QTEST_GUILESS_MAIN(TestModels)
#include "tst_models.moc"
