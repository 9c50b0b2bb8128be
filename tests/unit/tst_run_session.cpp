// RunSession against FakeAgents on loopback: the real control protocol, no
// engine, so each failure an agent can show is played in well under a second
// or two and must end the run with a clear message, keeping what arrived.
#include "fake_agent.h"

#include <handshake.h>
#include <run_session.h>

#include <QSignalSpy>
#include <QtTest>

#include <memory>

using namespace dlion;
using test::FakeAgent;

namespace {

constexpr int kRounds = 5;

struct Run {
    QByteArray secret = protocol::handshake::makeSecret();
    std::vector<std::unique_ptr<FakeAgent>> agents;
    core::RunSession session;
    bool ok = false;
    QString message;

    // Agents with these faults (one each) and a job for them; false if an agent cannot listen.
    bool start(const QList<FakeAgent::Fault> &faults)
    {
        QList<core::AgentEndpoint> endpoints;
        for (FakeAgent::Fault f : faults) {
            agents.push_back(std::make_unique<FakeAgent>(secret, FakeAgent::Script{f, kRounds, 300}));
            if (!agents.back()->listen())
                return false;
            endpoints.append(agents.back()->endpoint());
        }
        QObject::connect(&session, &core::RunSession::finished, &session, [this](bool o, const QString &m) {
            ok = o;
            message = m;
        });
        protocol::JobSpec job;
        job.budget.maxRounds = kRounds;
        session.setElastic(false);
        session.setHeartbeatTimeout(500);
        session.start(job, endpoints, secret, QStringLiteral("127.0.0.1"), 1);
        return true;
    }

    bool waitFinished()
    {
        QSignalSpy done(&session, &core::RunSession::finished);
        return session.state() == core::RunSession::State::Failed || session.state() == core::RunSession::State::Finished
            || done.wait(10000);
    }
};

} // namespace

class TestRunSession : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void trainsWithFakeAgents();
    void slowHandshakeStillTrains();
    void refusedJobFailsTheRun();
    void droppedConnectionFailsTheRun();
    void silentAgentFailsTheRun();
};

void TestRunSession::trainsWithFakeAgents()
{
    Run run;
    QVERIFY(run.start({FakeAgent::Fault::None, FakeAgent::Fault::None}));
    QVERIFY(run.waitFinished());
    QVERIFY2(run.ok, qPrintable(run.message));
    for (int w = 0; w < 2; ++w) {
        QCOMPARE(run.session.data().rounds(w).size(), qsizetype(kRounds));
        QCOMPARE(run.session.workerState(w), protocol::WorkerState::Finished);
    }
}

void TestRunSession::slowHandshakeStillTrains()
{
    Run run;
    QVERIFY(run.start({FakeAgent::Fault::SlowHandshake, FakeAgent::Fault::None}));
    QVERIFY(run.waitFinished());
    QVERIFY2(run.ok, qPrintable(run.message));
    QCOMPARE(run.session.data().rounds(0).size(), qsizetype(kRounds));
}

void TestRunSession::refusedJobFailsTheRun()
{
    Run run;
    QVERIFY(run.start({FakeAgent::Fault::None, FakeAgent::Fault::RefuseJob}));
    QVERIFY(run.waitFinished());
    QVERIFY(!run.ok);
    QVERIFY2(run.message.contains("worker 1") && run.message.contains("invalid job: scripted refusal"), qPrintable(run.message));
    QCOMPARE(run.session.workerState(1), protocol::WorkerState::Failed);
    QCOMPARE(run.session.data().rounds(0).size(), qsizetype(kRounds));  // the other worker's telemetry is kept
}

void TestRunSession::droppedConnectionFailsTheRun()
{
    Run run;
    QVERIFY(run.start({FakeAgent::Fault::GoSilent, FakeAgent::Fault::Drop}));
    QVERIFY(run.waitFinished());
    QVERIFY(!run.ok);
    QVERIFY2(run.message.contains("worker 1 lost"), qPrintable(run.message));
    QCOMPARE(run.session.workerState(1), protocol::WorkerState::Lost);
    QCOMPARE(run.session.data().rounds(1).size(), qsizetype(kRounds));  // what it sent before the drop is kept
    // The run stopped the other worker.
    QVERIFY(run.agents[0]->commands().contains(protocol::commandName(protocol::Command::Stop)));
}

void TestRunSession::silentAgentFailsTheRun()
{
    Run run;
    QVERIFY(run.start({FakeAgent::Fault::None, FakeAgent::Fault::GoSilent}));
    QVERIFY(run.waitFinished());
    QVERIFY(!run.ok);
    QVERIFY2(run.message.contains("worker 1 lost") && run.message.contains("went silent for 0.5 s"), qPrintable(run.message));
    QCOMPARE(run.session.data().rounds(1).size(), qsizetype(kRounds));
}

QTEST_GUILESS_MAIN(TestRunSession)
#include "tst_run_session.moc"
