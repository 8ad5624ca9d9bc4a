"""The seed's worked example (64 GPUs: n1–n4 in r1, n5–n8 in r2) driven from the pages alone in
headless Chromium (issue 15 §4). The nodes come from the fixture (inventory arrives from agents,
not the UI) and so do the people's accounts; everything else is made on the pages: an operator
creates the priority classes, two teams with their members and a queue with an H100 quota for
each; the team members submit train-A (4×8), train-B (2×8) and four 2-GPU evals through the
submit form; after a placement round the rack grid and the node pages show train-A on n1–n4,
train-B on n5–n6 and the four evals packed on n7, leaving n8 whole. Then n3 fails (Xid 79) and
train-A's page offers the seed's three choices. Saves artifacts/worked-example-*.png."""
from __future__ import annotations

import os

import pytest
from django.contrib.auth.models import Group, User

from core.actors import Actor
from core.roles import OPERATORS_GROUP
from fleet.models import Node
from fleet.services import node_cordon
from scheduling.models import Workload
from scheduling.services import workload_stop_gang
from tests.browser import log_in
from tests.cluster import FLAVOR, run_round

# Playwright's sync API runs an event loop in this thread; the ORM calls made here while it is
# open are plain synchronous reads and service calls on the live server's test database.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

pytestmark = [pytest.mark.slow, pytest.mark.browser]

HEALTH = Actor.automation("health")
EVALS = [f"eval-{i}" for i in range(1, 5)]


def person(username: str, *, operator: bool = False) -> User:
    user = User.objects.create_user(username=username, password="pw-" + username)
    if operator:
        user.groups.add(Group.objects.get_or_create(name=OPERATORS_GROUP)[0])
    return user


def shot(page, artifacts_dir, name: str, selector: str | None = None) -> None:
    path = str(artifacts_dir / f"worked-example-{name}.png")
    if selector:
        page.locator(selector).screenshot(path=path)
    else:
        page.screenshot(path=path, full_page=True)


def create_priority_class(page, url: str, name: str, value: int, *, preemptible: bool, may_preempt: bool) -> None:
    from playwright.sync_api import expect

    page.goto(f"{url}/policy/priority-classes/new/")
    page.fill("#id_name", name)
    page.fill("#id_value", str(value))
    page.set_checked("#id_preemptible", preemptible)
    page.set_checked("#id_may_preempt", may_preempt)
    page.click("button.primary")
    expect(page.locator(f"tr[data-class={name}]")).to_contain_text(str(value))


def create_team(page, url: str, name: str, member: User) -> None:
    from playwright.sync_api import expect

    page.goto(f"{url}/policy/teams/")
    page.click("#new")
    page.fill("#id_name", name)
    page.click("button.primary")
    page.click(f"tr[data-team={name}] >> text=Edit")
    page.fill("#id_username", member.username)
    page.click("#member-add button")
    expect(page.locator(f"#members tr[data-member={member.username}]")).to_be_visible()


def create_queue(page, url: str, name: str, team: str, nominal: int) -> None:
    from playwright.sync_api import expect

    page.goto(f"{url}/policy/queues/new/")
    page.fill("#id_name", name)
    page.select_option("#id_team", team)
    page.locator(f"#quotas tr[data-flavor='{FLAVOR}'] input[name^=nominal]").fill(str(nominal))
    page.click("#save")
    expect(page.locator(f"tr[data-queue={name}] .quota[data-flavor='{FLAVOR}']")).to_contain_text(str(nominal))


def submit(page, url: str, *, name: str, team: str, priority: str, replicas: int, gpus: int,
           elastic_min: str = "") -> None:
    page.goto(f"{url}/scheduling/workloads/new/")
    page.fill("#id_name", name)
    page.select_option("#id_team", team)
    page.select_option("#id_priority_class", priority)
    page.fill("#id_replicas", str(replicas))
    page.fill("#id_gpus_per_replica", str(gpus))
    page.select_option("#id_flavor", FLAVOR)
    page.fill("#id_elastic_min_replicas", elastic_min)
    page.click("#submit-form button[type=submit]")


def workloads_on(page, url: str, node: str) -> list[str]:
    """The names the node's page lists under "Workloads on <node>"."""
    page.goto(f"{url}/nodes/{node}/")
    return sorted(page.locator("#workloads tbody tr td:first-child").all_inner_texts())


def allocated_cells(page, node: str) -> int:
    return page.locator(f"a.node-box[href='/nodes/{node}/'] .gpus i.g.allocated").count()


def test_the_worked_example_from_the_pages_alone(transactional_db, cluster, celery_eager, browser, live_server,
                                                artifacts_dir):
    from playwright.sync_api import expect

    url = live_server.url
    olga = person("olga", operator=True)
    tess, evan = person("tess"), person("evan")

    # The operator sets up the policy: priority classes, teams with members, queues with quotas.
    ops = log_in(browser, live_server, olga)
    shot(ops, artifacts_dir, "01-empty-fleet")
    create_priority_class(ops, url, "training-prod", 1000, preemptible=False, may_preempt=True)
    create_priority_class(ops, url, "eval", 50, preemptible=True, may_preempt=False)
    shot(ops, artifacts_dir, "02-priority-classes")
    create_team(ops, url, "research", tess)
    create_team(ops, url, "evaluation", evan)
    ops.goto(f"{url}/policy/teams/")
    shot(ops, artifacts_dir, "03-teams")
    create_queue(ops, url, "research-q", "research", 48)
    create_queue(ops, url, "eval-q", "evaluation", 16)
    shot(ops, artifacts_dir, "04-queues")

    # A team member submits from the form; a replica larger than a node is refused on its field.
    research = log_in(browser, live_server, tess)
    submit(research, url, name="train-A", team="research", priority="training-prod", replicas=4, gpus=9,
           elastic_min="3")
    expect(research.locator("#gpus_per_replica-errors")).to_contain_text(
        f"9 GPUs per replica is more than the largest {FLAVOR} node (8)")
    assert not Workload.objects.filter(name="train-A").exists()
    shot(research, artifacts_dir, "05-submit-form-error")
    research.fill("#id_gpus_per_replica", "8")
    research.click("#submit-form button[type=submit]")
    research.wait_for_url(f"{url}/scheduling/workloads/*/")
    expect(research.locator("h1")).to_contain_text("train-A")
    shot(research, artifacts_dir, "06-train-A-submitted")
    submit(research, url, name="train-B", team="research", priority="training-prod", replicas=2, gpus=8)
    research.wait_for_url(f"{url}/scheduling/workloads/*/")
    # The evaluation team's member sees only their own team on the form.
    evaluation = log_in(browser, live_server, evan)
    evaluation.goto(f"{url}/scheduling/workloads/new/")
    assert evaluation.locator("#id_team option").all_inner_texts() == ["evaluation"]
    for name in EVALS:
        submit(evaluation, url, name=name, team="evaluation", priority="eval", replicas=1, gpus=2)
        evaluation.wait_for_url(f"{url}/scheduling/workloads/*/")
    evaluation.goto(f"{url}/scheduling/workloads/")
    shot(evaluation, artifacts_dir, "07-workloads-pending")

    # A placement round, then the executor tick that starts what it admitted (the round's task).
    run_round()

    ops.goto(f"{url}/")
    for node in ("n1", "n2", "n3", "n4", "n5", "n6", "n7"):
        assert allocated_cells(ops, node) == 8, node
    assert allocated_cells(ops, "n8") == 0  # whole, for the next 8-GPU job
    shot(ops, artifacts_dir, "08-rack-grid")
    shot(ops, artifacts_dir, "09-saturation", "#saturation")
    for node in ("n1", "n2", "n3", "n4"):
        assert workloads_on(ops, url, node) == ["train-A"], node
    for node in ("n5", "n6"):
        assert workloads_on(ops, url, node) == ["train-B"], node
    assert workloads_on(ops, url, "n7") == EVALS
    shot(ops, artifacts_dir, "10-node-n7")
    ops.goto(f"{url}/nodes/n8/")
    expect(ops.locator("main")).to_contain_text("Nothing runs on n8.")

    # The new tables, with the worked example in them.
    ops.goto(f"{url}/nodes/?sort=name")
    expect(ops.locator("table#nodes tbody tr")).to_have_count(8)
    shot(ops, artifacts_dir, "11-nodes-table")
    ops.goto(f"{url}/gpus/?q=n7")
    shot(ops, artifacts_dir, "12-gpus-table")
    ops.goto(f"{url}/scheduling/workloads/")
    for name in ("train-A", "train-B", *EVALS):
        expect(ops.locator("table tbody tr", has_text=name)).to_contain_text("Running")
    shot(ops, artifacts_dir, "13-workloads-table")

    # n3 raises Xid 79: the health loop cordons it and stops train-A's gang; its restart spans racks.
    node_cordon(node=Node.objects.get(name="n3"), reason="Xid 79", actor=HEALTH)
    train_a = Workload.objects.get(name="train-A")
    workload_stop_gang(workload=train_a, reason="Xid 79 on n3 GPU 5", actor=HEALTH)
    run_round()
    research.goto(f"{url}/scheduling/workloads/{train_a.pk}/")
    panel = research.locator("#after-failure")
    expect(panel).to_contain_text("Xid 79 on n3 GPU 5")
    expect(panel).to_contain_text("now spans racks r1 and r2")
    expect(panel.locator("#choice-accept")).to_be_visible()
    expect(panel.locator("#choice-wait")).to_be_visible()
    expect(panel.locator("#choice-elastic")).to_contain_text("at least 3 of 4 replicas")
    shot(research, artifacts_dir, "14-after-failure", "#after-failure")
    research.fill("#after-failure-reason", "deadline tonight, slower is fine")
    research.click("#choice-accept")
    expect(research.locator("#after-failure-chosen")).to_contain_text("Decided by tess")
    expect(research.locator("#after-failure-chosen")).to_contain_text("accept")
    shot(research, artifacts_dir, "15-after-failure-accepted", "#after-failure")
    ops.goto(f"{url}/")
    assert allocated_cells(ops, "n8") == 8  # train-A's fourth replica
    assert workloads_on(ops, url, "n8") == ["train-A"]
