#!/usr/bin/env bash
# Deploy dynagent's GCP side with gcloud: topics, service account, least-privilege IAM,
# the reconcile and sweep Cloud Functions (gen2), the one-minute sweep schedule, and
# their monitoring: log-based metrics, alert policies and a dashboard.
# Run with --help for the options; infra/gcp/README.md explains what it creates and why.
#
# Idempotent where gcloud allows: what exists is described first and left alone (or
# updated in place, for the custom role, the schedule, the log-based metrics, the alert
# policies and the dashboard); the functions are redeployed.
# --dry-run prints every gcloud command, one per line and quoted for a shell, and runs
# none: it needs no credentials, no network and no gcloud at all.
#
# --delete removes what this script made for --name, and nothing else: each resource by
# the exact name derived here, and only if it carries what this script marks it with
# (the label dynagent-deployment=NAME, or the title or description it writes where a
# resource has no labels). It never deletes VMs. --delete --dry-run prints the deletes
# and runs none, but it does run the read-only lookups (describe, list, get-iam-policy)
# that find what exists and whose it is: it needs gcloud and credentials that may read.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

PROJECT=${DYNAGENT_PROJECT:-}
REGION=${DYNAGENT_REGION:-}
ZONES=${DYNAGENT_ZONES:-}
CONFIG=${DYNAGENT_CONFIG_FILE:-}
NAME=${DYNAGENT_NAME:-dynagent}
RUNTIME=${DYNAGENT_RUNTIME:-python313}
BRIDGE_ACCOUNTS=${DYNAGENT_BRIDGE_SERVICE_ACCOUNT:-}
ALERT_EMAIL=${DYNAGENT_ALERT_EMAIL:-}
DRY_RUN=0
DELETE=0
BRIDGE_LIST=()
# Flags of a deployment that mean nothing to --delete, as given on the command line.
CREATE_ONLY_FLAGS=()

# Every API the deployment touches: Cloud Functions gen2 runs on Cloud Run, builds with
# Cloud Build into Artifact Registry and is triggered through Eventarc.
SERVICES=(
  cloudfunctions.googleapis.com run.googleapis.com eventarc.googleapis.com
  pubsub.googleapis.com cloudscheduler.googleapis.com cloudbuild.googleapis.com
  compute.googleapis.com artifactregistry.googleapis.com iam.googleapis.com
  logging.googleapis.com monitoring.googleapis.com
)

# The Compute Engine calls the functions make (shared/dynagent/gcp/compute.py), and
# what instances.insert checks for the fields instance_body.py sets. Three more are
# added only when a pool needs them: compute.instances.setServiceAccount (a pool's
# service_account.email; with iam.serviceAccounts.actAs, granted on that account
# alone), compute.instances.setTags (network_tags), compute.subnetworks.useExternalIp
# (network_interface.external_ip) and compute.reservations.get (reservations; a
# reservation shared from another project needs it granted there too). Fields a pool
# adds through base_config may need more.
BASE_PERMISSIONS=(
  compute.instances.list          # observe: the pool's VMs, by label filter
  compute.instances.get           # read one VM before relabelling it
  compute.instances.create        # launch
  compute.instances.delete        # terminate
  compute.instances.stop          # warm pools: an idle agent stopped, not deleted
  compute.instances.start         # warm pools: a stopped agent started for new work
  compute.instances.setLabels     # launch with labels; the registered/idle marks
  compute.instances.setMetadata   # launch with the startup script
  compute.disks.create            # the boot disk made with the VM (named after it)
  compute.images.useReadOnly      # boot_disk_source_image in this project
  compute.images.get              # a boot image named by its family: images.getFromFamily
  compute.subnetworks.use         # the network interface's VPC subnetwork
  compute.zoneOperations.get      # wait for insert, delete and setLabels
)

usage() {
  cat <<'EOF'
usage: infra/gcp/deploy.sh --project P --region R --config FILE [options]
       infra/gcp/deploy.sh --delete --project P --region R [--name NAME] [--config FILE] [--dry-run]

  --project P      project for the topics, functions and schedule   ($DYNAGENT_PROJECT)
  --region R       region of the functions and the schedule          ($DYNAGENT_REGION)
  --config FILE    pool config (resource_pools with type: gcp)       ($DYNAGENT_CONFIG_FILE)
  --zone Z         a zone the pools may use; repeat or comma-separate ($DYNAGENT_ZONES)
                   (optional guard: every GCP pool's zone must be listed)
  --name NAME      prefix of every resource's name, default dynagent ($DYNAGENT_NAME)
  --runtime ID     Cloud Functions runtime, default python313        ($DYNAGENT_RUNTIME)
  --bridge-service-account EMAIL
                   may publish snapshots and read drain notices (dynagent bridge's
                   identity); repeatable
                                                   ($DYNAGENT_BRIDGE_SERVICE_ACCOUNT)
  --alert-email ADDRESS
                   an email notification channel for the alert policies
                                                   ($DYNAGENT_ALERT_EMAIL)
  --dry-run        print the gcloud commands, one per line, and run none
  --delete         remove what deploy.sh made for --name, and nothing else (never VMs);
                   with --config, also its role in the pools' other projects and its
                   grants on their service accounts; with --dry-run, print the deletes
  -h, --help       this help
EOF
}

die() {
  echo "deploy.sh: $*" >&2
  exit 2
}

# A flag's value, or a message that names the flag (not bash's "parameter null").
need_value() {
  if (($# < 2)) || [[ -z $2 || $2 == --* ]]; then
    die "$1 needs a value"
  fi
}

parse_args() {
  while (($#)); do
    case $1 in
      --project | --region | --config | --zone | --zones | --name | --runtime | \
        --bridge-service-account | --alert-email) need_value "$@" ;;&
      --runtime | --bridge-service-account | --alert-email) CREATE_ONLY_FLAGS+=("$1") ;;&
      --project) PROJECT=$2; shift ;;
      --region) REGION=$2; shift ;;
      --config) CONFIG=$2; shift ;;
      --zone | --zones) ZONES="${ZONES:+$ZONES,}$2"; shift ;;
      --name) NAME=$2; shift ;;
      --runtime) RUNTIME=$2; shift ;;
      --bridge-service-account) BRIDGE_ACCOUNTS="${BRIDGE_ACCOUNTS:+$BRIDGE_ACCOUNTS,}$2"; shift ;;
      --alert-email) ALERT_EMAIL=$2; shift ;;
      --dry-run) DRY_RUN=1 ;;
      --delete) DELETE=1 ;;
      -h | --help) usage; exit 0 ;;
      *) usage >&2; die "unknown argument: $1 (see --help)" ;;
    esac
    shift
  done
}

check_inputs() {
  ((!DELETE || !${#CREATE_ONLY_FLAGS[@]})) ||
    die "${CREATE_ONLY_FLAGS[0]} is for deploying, not for --delete: leave it out"
  [[ -n $PROJECT ]] ||
    die "--project is required: the project of the deployment's topics and functions (or set DYNAGENT_PROJECT)"
  [[ -n $REGION ]] ||
    die "--region is required: the region of the functions and the schedule (or set DYNAGENT_REGION)"
  if ((!DELETE)); then
    [[ -n $CONFIG ]] ||
      die "--config is required: the pool config to deploy (or set DYNAGENT_CONFIG_FILE)"
  fi
  [[ -z $CONFIG || -f $CONFIG ]] || die "config file $CONFIG not found"
  is_project_id "$PROJECT" || die "--project $PROJECT is not a project id"
  [[ $REGION =~ ^[a-z]+-[a-z]+[0-9]+$ ]] || die "--region $REGION is not a region"
  # The service account id "$NAME-fn" must be 6-30 characters.
  [[ $NAME =~ ^[a-z][a-z0-9-]{1,25}[a-z0-9]$ ]] ||
    die "--name $NAME: 3-27 lowercase letters, digits or -, starting with a letter"
  [[ $RUNTIME =~ ^python[0-9]+$ ]] || die "--runtime $RUNTIME is not a Python runtime id"
  local account
  IFS=, read -ra BRIDGE_LIST <<<"$BRIDGE_ACCOUNTS"
  for account in "${BRIDGE_LIST[@]}"; do
    [[ $account =~ ^[a-z0-9._-]+@[a-z0-9.-]+$ ]] ||
      die "--bridge-service-account $account is not a service account email"
  done
  [[ -z $ALERT_EMAIL || $ALERT_EMAIL =~ ^[^@[:space:]\'\"]+@[^@[:space:]\'\"]+$ ]] ||
    die "--alert-email $ALERT_EMAIL is not an email address"
  if ((DELETE)); then
    command -v gcloud >/dev/null ||
      die "gcloud is not on PATH: --delete looks up what exists, even with --dry-run"
  elif ((!DRY_RUN)); then
    command -v gcloud >/dev/null || die "gcloud is not on PATH (or use --dry-run)"
  fi
}

is_project_id() {
  [[ $1 =~ ^[a-z][a-z0-9-]{4,28}[a-z0-9]$ ]]
}

# --- the pools ------------------------------------------------------------------------

POOL_NAMES=() POOL_PROJECTS=() POOL_ZONES=() POOL_PREFIXES=() POOL_LABELS=()
PROJECTS_OF_POOLS=() AGENT_ACCOUNTS=() NEEDS_EXTERNAL_IP=0 NEEDS_TAGS=0 NEEDS_RESERVATIONS=0
# Pools of another cloud in the same config: left out, for their own deployment.
LEFT_POOLS=()

python_for_facts() {
  if [[ -n ${DYNAGENT_PYTHON:-} ]]; then
    echo "$DYNAGENT_PYTHON"
  elif [[ -x $ROOT/.venv/bin/python ]]; then
    echo "$ROOT/.venv/bin/python"
  else
    echo python3
  fi
}

# dynagent's own loader checks the config as the functions will load it, with the
# same defaults for a pool's unset project and zone (see location_env).
pool_facts() {
  local location
  IFS=, read -ra location <<<"$(location_env)"
  env "${location[@]}" "$(python_for_facts)" "$HERE/pool_facts.py" "$@"
}

read_pools() {
  local facts kind name project zone prefix key value account external tags reserved
  facts=$(pool_facts "$CONFIG") || die "the pool config $CONFIG cannot be deployed (see above)"
  while IFS=$'\t' read -r kind name project zone prefix key value account external tags reserved; do
    if [[ $kind == left ]]; then
      LEFT_POOLS+=("$name") # its next field is its cloud: aws, the only other
      continue
    fi
    [[ $kind == pool ]] || continue
    is_project_id "$project" || die "pool $name: project $project is not a project id"
    [[ $account == - || $account =~ ^[a-z0-9._-]+@[a-z0-9.-]+$ ]] ||
      die "pool $name: service_account.email $account is not a service account"
    POOL_NAMES+=("$name") POOL_PROJECTS+=("$project") POOL_ZONES+=("$zone")
    POOL_PREFIXES+=("$prefix") POOL_LABELS+=("$key=$value")
    add_unique PROJECTS_OF_POOLS "$project"
    [[ $account == - ]] || add_unique AGENT_ACCOUNTS "$account"
    [[ $external == no ]] || NEEDS_EXTERNAL_IP=1
    [[ $tags == no ]] || NEEDS_TAGS=1
    [[ ${reserved:-no} == no ]] || NEEDS_RESERVATIONS=1
  done <<<"$facts"
  ((${#POOL_NAMES[@]})) || die "no GCP pool in $CONFIG"
  check_zones
}

add_unique() {
  local -n list=$1
  local item
  for item in "${list[@]}"; do [[ $item == "$2" ]] && return 0; done
  list+=("$2")
}

check_zones() {
  [[ -n $ZONES ]] || return 0
  local i
  for i in "${!POOL_NAMES[@]}"; do
    [[ ",$ZONES," == *",${POOL_ZONES[i]},"* ]] ||
      die "pool ${POOL_NAMES[i]} is in zone ${POOL_ZONES[i]}, not in --zone $ZONES"
  done
}

# --- running (or printing) gcloud -----------------------------------------------------

# One word as a shell reads it back: bare when safe; a --flag=value word quotes its value
# only; "${VAR}" where a dry run leaves a captured value; anything else single-quoted.
quote() {
  local word=$1 safe='^[A-Za-z0-9_./:=@,+%-]+$' flag='^(--[a-z0-9-]+=)(.+)$'
  local placeholder='^([A-Za-z0-9_./:=@,+%-]|\$\{[A-Z_]+\})+$'
  # shellcheck disable=SC2016 # a literal ${ marks a placeholder
  if [[ $word =~ $safe ]]; then
    printf '%s' "$word"
  elif [[ $word =~ $flag ]]; then
    printf '%s%s' "${BASH_REMATCH[1]}" "$(quote "${BASH_REMATCH[2]}")"
  elif [[ $word == *'${'* && $word =~ $placeholder ]]; then
    printf '"%s"' "$word"
  else
    printf "'%s'" "${word//\'/\'\\\'\'}"
  fi
}

print_command() {
  local word line=""
  for word in "$@"; do line+="${line:+ }$(quote "$word")"; done
  printf '%s\n' "$line"
}

run() {
  if ((DRY_RUN)); then
    print_command "$@"
  else
    echo "+ $(print_command "$@")" >&2
    "$@"
  fi
}

# IAM lags behind a service account's creation: retry a binding a few times.
run_binding() {
  local attempt
  if ((DRY_RUN)); then
    run "$@"
    return
  fi
  for attempt in 1 2 3 4 5; do
    run "$@" >/dev/null && return 0
    ((attempt < 5)) && echo "deploy.sh: retrying in 10s" >&2 && sleep 10
  done
  die "failed: $(print_command "$@")"
}

# Whether a resource exists. A dry run assumes nothing does, and calls nothing.
exists() {
  ((DRY_RUN)) && return 1
  "$@" >/dev/null 2>&1
}

# VAR=$(command): a dry run prints that line and leaves "${VAR}" for later commands.
capture() {
  local var=$1
  shift
  if ((DRY_RUN)); then
    # shellcheck disable=SC2016 # printed for the reader's shell to expand, not ours
    printf '%s=$(%s)\n' "$var" "$(print_command "$@")"
    # shellcheck disable=SC2016
    printf -v "$var" '${%s}' "$var"
  else
    echo "+ $var=\$($(print_command "$@"))" >&2
    printf -v "$var" '%s' "$("$@")"
    [[ -n ${!var} ]] || die "$(print_command "$@") printed nothing"
  fi
}

# --- the deployment -------------------------------------------------------------------

SNAPSHOTS='' SWEEP_TOPIC='' DEAD_LETTERS='' DRAIN_NOTICES='' FN_ACCOUNT='' ROLE_ID='' STATUS_ROLE_ID='' WORK='' SOURCE=''
# What carries labels (topics, subscriptions, functions, alert policies, the
# dashboard) gets this one: --delete removes those only when they have it.
OWNER_KEY=dynagent-deployment OWNER_LABEL=''
# What has no labels is marked by the title, description or display name given here.
FN_ACCOUNT_TITLE='' ROLE_TITLE='' STATUS_ROLE_TITLE='' SCHEDULE_DESCRIPTION=''

name_resources() {
  OWNER_LABEL=$OWNER_KEY=$NAME
  FN_ACCOUNT_TITLE="dynagent functions ($NAME)"
  ROLE_TITLE="dynagent compute ($NAME)"
  STATUS_ROLE_TITLE="dynagent status labels ($NAME)"
  SCHEDULE_DESCRIPTION="dynagent ($NAME): sweep every pool every minute"
  SNAPSHOTS=$NAME-snapshots
  SWEEP_TOPIC=$NAME-sweep
  DEAD_LETTERS=$NAME-dead-letters
  DRAIN_NOTICES=$NAME-drain-notices # a topic, and the bridge's subscription on it
  FN_ACCOUNT=$NAME-fn@$PROJECT.iam.gserviceaccount.com
  ROLE_ID=${NAME//-/_}_compute # custom role ids allow letters, digits, _ and . only
  STATUS_ROLE_ID=${NAME//-/_}_status
}

enable_services() {
  local project
  run gcloud services enable "${SERVICES[@]}" --project="$PROJECT"
  # A pool in another project needs Compute Engine and IAM (its custom role) there.
  for project in "${PROJECTS_OF_POOLS[@]}"; do
    [[ $project == "$PROJECT" ]] ||
      run gcloud services enable compute.googleapis.com iam.googleapis.com --project="$project"
  done
}

# One that exists gets the label too (an older deploy.sh made them without), so that
# --delete knows it for this deployment's.
ensure_topic() {
  if exists gcloud pubsub topics describe "$1" --project="$PROJECT"; then
    run gcloud pubsub topics update "$1" --project="$PROJECT" --update-labels="$OWNER_LABEL"
  else
    run gcloud pubsub topics create "$1" --project="$PROJECT" --labels="$OWNER_LABEL"
  fi
}

# ensure_subscription NAME TOPIC RETENTION: one that never expires for being idle.
ensure_subscription() {
  if exists gcloud pubsub subscriptions describe "$1" --project="$PROJECT"; then
    run gcloud pubsub subscriptions update "$1" --project="$PROJECT" \
      --update-labels="$OWNER_LABEL"
  else
    run gcloud pubsub subscriptions create "$1" --topic="$2" \
      --message-retention-duration="$3" --expiration-period=never --project="$PROJECT" \
      --labels="$OWNER_LABEL"
  fi
}

create_topics() {
  ensure_topic "$SNAPSHOTS"
  ensure_topic "$SWEEP_TOPIC"
  ensure_topic "$DEAD_LETTERS"
  ensure_topic "$DRAIN_NOTICES"
  # Messages published to a topic without subscriptions are lost: this one keeps the
  # dead letters for a week.
  ensure_subscription "$DEAD_LETTERS" "$DEAD_LETTERS" 7d
  # The bridge pulls drain notices here. The functions send them again every pass, so
  # an hour's retention covers a bridge restart and keeps no stale pile.
  ensure_subscription "$DRAIN_NOTICES" "$DRAIN_NOTICES" 1h
}

create_service_account() {
  exists gcloud iam service-accounts describe "$FN_ACCOUNT" --project="$PROJECT" ||
    run gcloud iam service-accounts create "$NAME-fn" --project="$PROJECT" \
      --display-name="$FN_ACCOUNT_TITLE" \
      --description="Runs and triggers the $NAME reconcile and sweep functions"
}

role_permissions() {
  local permissions=("${BASE_PERMISSIONS[@]}")
  ((${#AGENT_ACCOUNTS[@]})) && permissions+=(compute.instances.setServiceAccount)
  ((NEEDS_TAGS)) && permissions+=(compute.instances.setTags)
  ((NEEDS_EXTERNAL_IP)) && permissions+=(compute.subnetworks.useExternalIp)
  ((NEEDS_RESERVATIONS)) && permissions+=(compute.reservations.get)
  local IFS=,
  echo "${permissions[*]}"
}

# The IAM condition on the role binding in one pool project. What it cannot restrict:
#  - compute.instances.list names no instance (it is checked on the project), so the
#    functions can list, and read the metadata of, every VM in the project;
#  - labels: IAM conditions cannot test Compute Engine labels (resource.name, .type
#    and .service, and Resource Manager tags, are the only resource attributes), so the
#    managed label pair is enforced by the functions' code, not by IAM: any VM someone
#    names with a pool's prefix, in its zone, is within reach;
#  - operations, images and subnetworks are not instances or disks: the role's
#    permissions on them hold for all of them in the project;
#  - what a launch asks for (machine type, GPUs, image) is not an IAM attribute:
#    quotas and organization policies bound that.
condition_expression() {
  local project=$1 i clauses=()
  for i in "${!POOL_NAMES[@]}"; do
    [[ ${POOL_PROJECTS[i]} == "$project" ]] || continue
    local zone=projects/$project/zones/${POOL_ZONES[i]}
    add_unique clauses "resource.name.startsWith(\"$zone/instances/${POOL_PREFIXES[i]}\")"
    # The boot disk takes the instance's name.
    add_unique clauses "resource.name.startsWith(\"$zone/disks/${POOL_PREFIXES[i]}\")"
  done
  local expression='(resource.type != "compute.googleapis.com/Instance"'
  expression+=' && resource.type != "compute.googleapis.com/Disk")'
  local clause
  for clause in "${clauses[@]}"; do expression+=" || $clause"; done
  echo "$expression"
}

write_condition() {
  local project=$1 file=$2 expression
  expression=$(condition_expression "$project")
  # JSON: the expression's double quotes escaped; names are [a-z0-9-] (checked above).
  printf '{"title": "%s", "description": "%s", "expression": "%s"}\n' \
    "$NAME managed instances" \
    "Instances and boot disks named with a $NAME pool prefix, in the pools' zones" \
    "${expression//\"/\\\"}" >"$file"
}

# ensure_role PROJECT ID TITLE DESCRIPTION PERMISSIONS
ensure_role() {
  local project=$1 id=$2 title=$3 description=$4 granted=$5 deleted
  if exists gcloud iam roles describe "$id" --project="$project"; then
    # A role --delete removed stays, deleted, for 7 days, and its id cannot be taken
    # again by a new role: a deployment under the same name brings it back.
    lookup deleted gcloud iam roles describe "$id" --project="$project" --format='value(deleted)'
    [[ $deleted != True ]] || run gcloud iam roles undelete "$id" --project="$project"
    run gcloud iam roles update "$id" --project="$project" --permissions="$granted" --quiet
  else
    run gcloud iam roles create "$id" --project="$project" --stage=GA --title="$title" \
      --description="$description" --permissions="$granted"
  fi
}

grant_compute_role() {
  local project permissions file role
  permissions=$(role_permissions)
  for project in "${PROJECTS_OF_POOLS[@]}"; do
    role=projects/$project/roles/$ROLE_ID
    ensure_role "$project" "$ROLE_ID" "$ROLE_TITLE" \
      "What the $NAME functions do to Compute Engine" "$permissions"
    file=$WORK/iam-condition-$project.json
    write_condition "$project" "$file"
    ((DRY_RUN)) && echo "# $project: $(condition_expression "$project")"
    bind_role "$project" "$role" "$file"
  done
}

# A binding's condition cannot be edited: one with another expression is replaced.
bind_role() {
  local project=$1 role=$2 file=$3 current=""
  local member=serviceAccount:$FN_ACCOUNT
  if ((!DRY_RUN)); then
    current=$(gcloud projects get-iam-policy "$project" --flatten=bindings[].members \
      --filter="bindings.role=\"$role\" AND bindings.members=\"$member\"" \
      --format='value(bindings.condition.expression)')
    [[ $current == "$(condition_expression "$project")" ]] && return 0
    [[ -z $current ]] ||
      run gcloud projects remove-iam-policy-binding "$project" --member="$member" \
        --role="$role" --all --quiet >/dev/null
  fi
  run_binding gcloud projects add-iam-policy-binding "$project" --member="$member" \
    --role="$role" --condition-from-file="$file" --quiet
}

grant_service_account_use() {
  local account
  # Launching a VM that runs as a service account takes actAs on that account only.
  for account in "${AGENT_ACCOUNTS[@]}"; do
    run_binding gcloud iam service-accounts add-iam-policy-binding "$account" \
      --member="serviceAccount:$FN_ACCOUNT" --role=roles/iam.serviceAccountUser --quiet
  done
  # reconcile sets aside messages it can never apply on the dead-letter topic, and tells
  # the bridge which agents to drain on the drain-notice topic.
  run_binding gcloud pubsub topics add-iam-policy-binding "$DEAD_LETTERS" --project="$PROJECT" \
    --member="serviceAccount:$FN_ACCOUNT" --role=roles/pubsub.publisher
  run_binding gcloud pubsub topics add-iam-policy-binding "$DRAIN_NOTICES" --project="$PROJECT" \
    --member="serviceAccount:$FN_ACCOUNT" --role=roles/pubsub.publisher
}

# reconcile keeps each pool's last applied snapshot, summarised, in the snapshot
# topic's labels for `dynagent status`: reading and updating that topic, and no other.
# No predefined role is that narrow (pubsub.editor can delete topics), hence a custom one.
grant_status_labels() {
  local role=projects/$PROJECT/roles/$STATUS_ROLE_ID
  ensure_role "$PROJECT" "$STATUS_ROLE_ID" "$STATUS_ROLE_TITLE" \
    "The $NAME reconcile function labels its snapshot topic" pubsub.topics.get,pubsub.topics.update
  run_binding gcloud pubsub topics add-iam-policy-binding "$SNAPSHOTS" --project="$PROJECT" \
    --member="serviceAccount:$FN_ACCOUNT" --role="$role"
}

# The bridge publishes snapshots and reads drain notices, and does nothing else:
# publisher on the snapshot topic, subscriber on the drain-notice subscription.
grant_bridge() {
  local account
  for account in "${BRIDGE_LIST[@]}"; do
    run_binding gcloud pubsub topics add-iam-policy-binding "$SNAPSHOTS" --project="$PROJECT" \
      --member="serviceAccount:$account" --role=roles/pubsub.publisher
    run_binding gcloud pubsub subscriptions add-iam-policy-binding "$DRAIN_NOTICES" \
      --project="$PROJECT" --member="serviceAccount:$account" --role=roles/pubsub.subscriber
  done
}

stage_source() {
  SOURCE=$WORK/source
  mkdir -p "$SOURCE"
  if compgen -G "$ROOT/functions/gcp/*.py" >/dev/null; then
    cp "$ROOT"/functions/gcp/*.py "$SOURCE/"
  elif ((DRY_RUN)); then
    echo "# WARNING: functions/gcp/*.py not found: the staged source has no entry points"
  else
    die "functions/gcp/*.py not found: nothing to deploy"
  fi
  # Only what runs in a Cloud Function: not the AWS adapter, local clouds, demo, simulator.
  (cd "$ROOT/shared" && tar --exclude=__pycache__ --exclude='*.pyc' \
    --exclude=dynagent/aws --exclude=dynagent/testing --exclude=dynagent/demo --exclude=dynagent/bridge \
    --exclude=dynagent/simulate -cf - dynagent) |
    (cd "$SOURCE" && tar -xf -)
  cp "$HERE/requirements.txt" "$SOURCE/requirements.txt"
  # The config's GCP pools: the file itself, unless it also has AWS pools.
  pool_facts --packed "$CONFIG" >"$SOURCE/dynagent.yaml" || die "could not stage $CONFIG"
  ((DRY_RUN)) && echo "# staged function source: $SOURCE"
  return 0
}

# A pool without project or zone takes them from the functions' environment, as
# Determined's master takes them from its metadata: the deployment's project, and its
# zone when exactly one --zone is given.
location_env() {
  local env="DYNAGENT_GCP_PROJECT=$PROJECT"
  [[ -z $ZONES || $ZONES == *,* ]] || env+=",DYNAGENT_GCP_ZONE=$ZONES"
  echo "$env"
}

# One writer per pool: at most one instance of each function, taking one event at a
# time, so reconciles never overlap; Pub/Sub holds back and retries the rest.
deploy_function() {
  local name=$1 entry_point=$2 topic=$3
  shift 3
  run gcloud functions deploy "$name" --gen2 --project="$PROJECT" --region="$REGION" \
    --runtime="$RUNTIME" --source="$SOURCE" --entry-point="$entry_point" \
    --trigger-topic="$topic" --service-account="$FN_ACCOUNT" \
    --trigger-service-account="$FN_ACCOUNT" \
    --set-env-vars="DYNAGENT_CONFIG=dynagent.yaml,DYNAGENT_DEAD_LETTER_TOPIC=projects/$PROJECT/topics/$DEAD_LETTERS,DYNAGENT_SNAPSHOT_TOPIC=projects/$PROJECT/topics/$SNAPSHOTS,DYNAGENT_DRAIN_NOTICE_TOPIC=projects/$PROJECT/topics/$DRAIN_NOTICES,$(location_env)" \
    --max-instances=1 --concurrency=1 --ingress-settings=internal-only \
    --memory=512Mi --timeout=300s --update-labels="$OWNER_LABEL" "$@" --quiet
  # Eventarc pushes with the trigger's service account, which must be an invoker.
  run_binding gcloud functions add-invoker-policy-binding "$name" --project="$PROJECT" \
    --region="$REGION" --member="serviceAccount:$FN_ACCOUNT"
}

deploy_functions() {
  deploy_function "$NAME-reconcile" reconcile "$SNAPSHOTS" --retry
  # No --retry: a failed sweep is replaced by the next one a minute later.
  deploy_function "$NAME-sweep" sweep "$SWEEP_TOPIC"
}

# Eventarc makes the reconcile trigger's subscription; gcloud functions deploy has no
# flag for its dead-letter policy, so it is set on that subscription afterwards (again
# after each deploy, in case the trigger was recreated). A snapshot that keeps failing
# goes to the dead-letter topic after 5 deliveries (Pub/Sub's minimum), retried after
# 10 s doubling up to 5 min, as on AWS.
dead_letter_reconcile_trigger() {
  local agent
  capture TRIGGER gcloud functions describe "$NAME-reconcile" --v2 --project="$PROJECT" \
    --region="$REGION" --format='value(eventTrigger.trigger.basename())'
  capture SUBSCRIPTION gcloud eventarc triggers describe "$TRIGGER" --project="$PROJECT" \
    --location="$REGION" --format='value(transport.pubsub.subscription)'
  capture PROJECT_NUMBER gcloud projects describe "$PROJECT" --format='value(projectNumber)'
  # Pub/Sub's own service agent forwards dead letters: it publishes to the topic and
  # acknowledges on the subscription.
  agent=serviceAccount:service-$PROJECT_NUMBER@gcp-sa-pubsub.iam.gserviceaccount.com
  run_binding gcloud pubsub topics add-iam-policy-binding "$DEAD_LETTERS" --project="$PROJECT" \
    --member="$agent" --role=roles/pubsub.publisher
  run_binding gcloud pubsub subscriptions add-iam-policy-binding "$SUBSCRIPTION" \
    --project="$PROJECT" --member="$agent" --role=roles/pubsub.subscriber
  run gcloud pubsub subscriptions update "$SUBSCRIPTION" --project="$PROJECT" \
    --dead-letter-topic="projects/$PROJECT/topics/$DEAD_LETTERS" --max-delivery-attempts=5 \
    --min-retry-delay=10s --max-retry-delay=300s
}

schedule_sweep() {
  local job=(--location="$REGION" --project="$PROJECT" --schedule='* * * * *'
    --time-zone=Etc/UTC --topic="projects/$PROJECT/topics/$SWEEP_TOPIC"
    --message-body='{"type": "sweep"}')
  if exists gcloud scheduler jobs describe "$NAME-sweep" --location="$REGION" --project="$PROJECT"; then
    run gcloud scheduler jobs update pubsub "$NAME-sweep" "${job[@]}"
  else
    run gcloud scheduler jobs create pubsub "$NAME-sweep" "${job[@]}" \
      --description="$SCHEDULE_DESCRIPTION"
  fi
}

# --- monitoring -----------------------------------------------------------------------

CHANNEL=''

# VAR=$(command) for a lookup that may find nothing: a dry run finds nothing.
lookup() {
  local var=$1 out=''
  shift
  ((DRY_RUN)) || out=$("$@" 2>/dev/null) || out=''
  printf -v "$var" '%s' "${out%%$'\n'*}" # the first, should there be several
}

# The email channel, found by its address or created; policies notify it.
notification_channel() {
  [[ -n $ALERT_EMAIL ]] || return 0
  lookup CHANNEL gcloud beta monitoring channels list --project="$PROJECT" \
    --filter="type=\"email\" AND labels.email_address=\"$ALERT_EMAIL\"" --format='value(name)'
  [[ -n $CHANNEL ]] ||
    capture CHANNEL gcloud beta monitoring channels create --project="$PROJECT" --type=email \
      --display-name="$NAME alerts ($ALERT_EMAIL)" --channel-labels="email_address=$ALERT_EMAIL" \
      --format='value(name)'
}

# Log-based metrics have ids; policies and the dashboard only display names, which
# monitoring.py makes unique with NAME, so a rerun finds and replaces them.
ensure_log_metric() {
  local verb=create
  exists gcloud logging metrics describe "$1" --project="$PROJECT" && verb=update
  run gcloud logging metrics "$verb" "$1" --project="$PROJECT" --config-from-file="$2"
}

ensure_policy() {
  local found
  lookup found gcloud alpha monitoring policies list --project="$PROJECT" \
    --filter="displayName=\"$1\"" --format='value(name)'
  if [[ -n $found ]]; then
    run gcloud alpha monitoring policies update "$found" --project="$PROJECT" \
      --policy-from-file="$2" --quiet
  else
    run gcloud alpha monitoring policies create --project="$PROJECT" --policy-from-file="$2" --quiet
  fi
}

ensure_dashboard() {
  local found
  lookup found gcloud monitoring dashboards list --project="$PROJECT" \
    --filter="displayName=\"$1\"" --format='value(name)'
  if [[ -n $found ]]; then
    run gcloud monitoring dashboards update "$found" --project="$PROJECT" \
      --config-from-file="$2" --quiet
  else
    run gcloud monitoring dashboards create --project="$PROJECT" --config-from-file="$2" --quiet
  fi
}

# What monitoring.py writes, one line each: KIND KEY FILE (tab-separated).
monitoring_files() {
  "$(python_for_facts)" "$HERE/monitoring.py" "$WORK/monitoring" "$NAME" "$1" ||
    die "could not write the monitoring files"
}

# The files come from the metrics CATALOG (monitoring.py); the functions log each point
# as {"message": "dynagent metric", "metric": ..., "value": ..., "pool": ..., ...}.
create_monitoring() {
  local manifest kind key file
  notification_channel
  manifest=$(monitoring_files "$CHANNEL")
  ((DRY_RUN)) && echo "# monitoring files: $WORK/monitoring"
  # shellcheck disable=SC2016 # the placeholder itself is the message
  [[ $CHANNEL == '${CHANNEL}' ]] &&
    echo '# the policy files name the channel as ${CHANNEL}; a real run writes its name'
  # fd 3, so that no gcloud reads the list on its stdin.
  while IFS=$'\t' read -r -u 3 kind key file; do
    case $kind in
      metric) ensure_log_metric "$key" "$file" ;;
      policy) ensure_policy "$key" "$file" ;;
      dashboard) ensure_dashboard "$key" "$file" ;;
    esac
  done 3<<<"$manifest"
}

# --- deleting what deploy.sh made (--delete) ------------------------------------------

DELETED=0
LEFT=() # what exists under one of this deployment's names without its mark, and why

# look VAR gcloud ...: a read-only lookup, run in a dry run too, since --delete deletes
# only what it finds, and finds it marked as this deployment's. VAR gets what gcloud
# printed. Returns 1 when gcloud says the resource is not there; any other failure ends
# the run, for a permission denied is not "already gone".
look() {
  local var=$1 out='' failed=0
  shift
  [[ " ${*:2:4} " =~ \ (describe|list|get-iam-policy)\  ]] ||
    die "not a read-only lookup: $(print_command "$@")"
  out=$("$@" 2>"$WORK/lookup-errors") || failed=1
  if ((failed)); then
    grep -Eq 'NOT_FOUND|\[404\]|[Nn]ot found|does not exist' "$WORK/lookup-errors" && return 1
    cat "$WORK/lookup-errors" >&2
    die "could not look it up: $(print_command "$@")"
  fi
  printf -v "$var" '%s' "$out"
}

# What a found resource lacks of this deployment's mark; nothing when it has it.
# Labels as gcloud's value(labels) prints them: k=v;k=v.
label_lacking() {
  [[ ";$1;" == *";$OWNER_LABEL;"* ]] || echo "no label $OWNER_LABEL"
}

# FOUND EXPECTED FIELD
text_lacking() {
  [[ $1 == "$2" ]] || echo "its $3 is not '$2'"
}

# delete_if_own WHAT LACKS COMMAND...: delete it (or, in a dry run, print the delete)
# when it lacks nothing; otherwise leave it, and say at the end why.
delete_if_own() {
  local what=$1 lacks=$2
  shift 2
  if [[ -n $lacks ]]; then
    LEFT+=("$what: $lacks")
  elif ((DRY_RUN)); then
    run "$@"
    DELETED=$((DELETED + 1))
  else
    # gcloud's answers to stderr, beside the commands: stdout keeps the notes.
    run "$@" >&2 || die "failed: $(print_command "$@")"
    DELETED=$((DELETED + 1))
  fi
}

delete_schedule() {
  local description
  look description gcloud scheduler jobs describe "$NAME-sweep" --location="$REGION" \
    --project="$PROJECT" --format='value(description)' || return 0
  delete_if_own "Cloud Scheduler job $NAME-sweep" \
    "$(text_lacking "$description" "$SCHEDULE_DESCRIPTION" description)" \
    gcloud scheduler jobs delete "$NAME-sweep" --location="$REGION" --project="$PROJECT" --quiet
}

# Its Eventarc trigger, the trigger's subscription and the invoker grant go with it.
delete_function() {
  local labels
  look labels gcloud functions describe "$1" --v2 --project="$PROJECT" --region="$REGION" \
    --format='value(labels)' || return 0
  delete_if_own "Cloud Function $1" "$(label_lacking "$labels")" \
    gcloud functions delete "$1" --project="$PROJECT" --region="$REGION" --quiet
}

# delete_listed WHAT DISPLAY_NAME FOUND COMMAND...: each line NAME<tab>DISPLAY<tab>LABELS
# of FOUND (a list) with that display name (found by display name, as deploy.sh finds them, there
# may be several), by its NAME.
delete_listed() {
  local what=$1 display=$2 found=$3 name shown labels
  shift 3
  while IFS=$'\t' read -r -u 3 name shown labels; do
    [[ -n $name && $shown == "$display" ]] || continue
    delete_if_own "$what '$display' ($name)" "$(label_lacking "$labels")" \
      "$@" "$name" --project="$PROJECT" --quiet
  done 3<<<"$found"
}

# The alert policies first: they read the log-based metrics.
delete_monitoring() {
  local manifest kind key file policies='' dashboards='' description
  manifest=$(monitoring_files "")
  look policies gcloud alpha monitoring policies list --project="$PROJECT" \
    --format='value(name,displayName,userLabels)' || policies=''
  look dashboards gcloud monitoring dashboards list --project="$PROJECT" \
    --format='value(name,displayName,labels)' || dashboards=''
  while IFS=$'\t' read -r -u 3 kind key file; do
    case $kind in
      policy) delete_listed "alert policy" "$key" "$policies" gcloud alpha monitoring policies delete ;;
      dashboard) delete_listed dashboard "$key" "$dashboards" gcloud monitoring dashboards delete ;;
    esac
  done 3<<<"$manifest"
  while IFS=$'\t' read -r -u 3 kind key file; do
    [[ $kind == metric ]] || continue
    look description gcloud logging metrics describe "$key" --project="$PROJECT" \
      --format='value(description)' || continue
    # Log-based metrics have no labels: monitoring.py starts each description so.
    delete_if_own "log-based metric $key" \
      "$(text_lacking "${description%%): *}): " "dynagent ($NAME): " "description's start")" \
      gcloud logging metrics delete "$key" --project="$PROJECT" --quiet
  done 3<<<"$manifest"
}

# pubsub_delete topics|subscriptions NAME: the topics' grants go with them.
pubsub_delete() {
  local labels
  look labels gcloud pubsub "$1" describe "$2" --project="$PROJECT" --format='value(labels)' ||
    return 0
  delete_if_own "Pub/Sub ${1%s} $2" "$(label_lacking "$labels")" \
    gcloud pubsub "$1" delete "$2" --project="$PROJECT" --quiet
}

# ungrant ROLE RESOURCE GROUP...: remove the role deploy.sh granted the functions'
# account on RESOURCE (gcloud GROUP: a project, or a pool's service account), if held.
ungrant() {
  local role=$1 resource=$2 member=serviceAccount:$FN_ACCOUNT roles=''
  shift 2
  look roles gcloud "$@" get-iam-policy "$resource" --flatten='bindings[].members' \
    --filter="bindings.role=\"$role\" AND bindings.members=\"$member\"" \
    --format='value(bindings.role)' || return 0
  grep -qxF -- "$role" <<<"$roles" || return 0
  delete_if_own "grant of $role to $FN_ACCOUNT on $resource" "" \
    gcloud "$@" remove-iam-policy-binding "$resource" --member="$member" --role="$role" --all --quiet
}

# delete_role PROJECT ID TITLE: a deleted role is as good as gone (GCP purges it).
delete_role() {
  local found title deleted
  look found gcloud iam roles describe "$2" --project="$1" --format='value(title,deleted)' ||
    return 0
  IFS=$'\t' read -r title deleted <<<"$found"
  [[ $deleted != True ]] || return 0
  delete_if_own "custom role $2 in project $1" "$(text_lacking "$title" "$3" title)" \
    gcloud iam roles delete "$2" --project="$1" --quiet
}

# The account's grants go first, and only when the account is this deployment's; then
# the custom roles; then the account.
delete_identity() {
  local title='' lacks='' found=1 project account
  look title gcloud iam service-accounts describe "$FN_ACCOUNT" --project="$PROJECT" \
    --format='value(displayName)' || found=0
  ((found)) && lacks=$(text_lacking "$title" "$FN_ACCOUNT_TITLE" "display name")
  if ((found)) && [[ -z $lacks ]]; then
    for project in "${PROJECTS_OF_POOLS[@]}"; do
      ungrant "projects/$project/roles/$ROLE_ID" "$project" projects
    done
    for account in "${AGENT_ACCOUNTS[@]}"; do
      ungrant roles/iam.serviceAccountUser "$account" iam service-accounts
    done
  fi
  for project in "${PROJECTS_OF_POOLS[@]}"; do
    delete_role "$project" "$ROLE_ID" "$ROLE_TITLE"
  done
  delete_role "$PROJECT" "$STATUS_ROLE_ID" "$STATUS_ROLE_TITLE"
  ((found)) || return 0
  delete_if_own "service account $FN_ACCOUNT" "$lacks" \
    gcloud iam service-accounts delete "$FN_ACCOUNT" --project="$PROJECT" --quiet
}

# What --delete leaves, and how to remove it.
delete_notes() {
  local i channels='' name shown filter
  look channels gcloud beta monitoring channels list --project="$PROJECT" \
    --format='value(name,displayName)' || channels=''
  while IFS=$'\t' read -r name shown; do
    [[ $shown == "$NAME alerts ("*")" ]] || continue
    echo "# left: notification channel $name ('$shown'): deploy.sh reuses a channel by" \
      "its address, so other policies may notify it; if none does:" \
      "gcloud beta monitoring channels delete $name --project=$PROJECT"
  done <<<"$channels"
  if ((${#POOL_NAMES[@]})); then
    for i in "${!POOL_NAMES[@]}"; do
      filter="labels.${POOL_LABELS[i]%%=*}=${POOL_LABELS[i]#*=} AND labels.dynagent-pool=${POOL_NAMES[i]}"
      echo "# left: pool ${POOL_NAMES[i]}'s instances (--delete never deletes VMs): drain" \
        "their agents, then delete the VMs that" \
        "gcloud compute instances list --project=${POOL_PROJECTS[i]} --filter='$filter'" \
        "lists (docs/master.md, 'Retire dynagent's agents')"
    done
  else
    echo "# left: the pools' instances (--delete never deletes VMs): drain their agents," \
      "then delete the VMs that" \
      "gcloud compute instances list --project=$PROJECT --filter='labels.dynagent-pool:*'" \
      "lists (docs/master.md, 'Retire dynagent's agents')"
    echo "# without --config, only project $PROJECT was searched: give the pool config to" \
      "remove the compute role from the pools' other projects and the functions' grant on" \
      "the pools' service accounts"
  fi
  echo "# left: the enabled services, and Cloud Functions' build images and source" \
    "archives (gcf-artifacts, gcf-v2-sources-*), which other functions share"
  for i in "${!LEFT[@]}"; do
    echo "# left, not marked as deploy.sh's for '$NAME': ${LEFT[i]}"
  done
  ((!${#LEFT[@]})) ||
    echo "# if a deploy.sh from before the marks made those, rerun it, then --delete;" \
      "otherwise they are someone else's"
}

delete_deployment() {
  if [[ -n $CONFIG ]]; then
    read_pools
  else
    PROJECTS_OF_POOLS=("$PROJECT")
  fi
  name_resources
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/dynagent-gcp-$NAME.XXXXXX")
  trap 'rm -rf "$WORK"' EXIT
  echo "# deleting dynagent '$NAME' on GCP: project $PROJECT, region $REGION"
  # The schedule and the functions first, so nothing runs while the rest goes.
  delete_schedule
  delete_function "$NAME-reconcile"
  delete_function "$NAME-sweep"
  delete_monitoring
  pubsub_delete subscriptions "$DEAD_LETTERS"
  pubsub_delete subscriptions "$DRAIN_NOTICES"
  pubsub_delete topics "$SNAPSHOTS"
  pubsub_delete topics "$SWEEP_TOPIC"
  pubsub_delete topics "$DEAD_LETTERS"
  pubsub_delete topics "$DRAIN_NOTICES"
  delete_identity
  delete_notes
  if ((DRY_RUN)); then
    echo "# dry run: $DELETED to delete, nothing was deleted"
  elif ((DELETED)); then
    echo "# deleted $DELETED resources and grants of dynagent '$NAME'"
  else
    echo "# nothing of dynagent '$NAME' was left to delete"
  fi
}

# --- the run ----------------------------------------------------------------------------

summary() {
  local i
  echo "# dynagent '$NAME' on GCP: project $PROJECT, region $REGION"
  for i in "${!POOL_NAMES[@]}"; do
    echo "# pool ${POOL_NAMES[i]}: ${POOL_PROJECTS[i]}/${POOL_ZONES[i]}," \
      "instances ${POOL_PREFIXES[i]}*, label ${POOL_LABELS[i]}"
  done
  for i in "${!LEFT_POOLS[@]}"; do
    echo "# pool ${LEFT_POOLS[i]}: an AWS pool, left to \`make sam\` (infra/aws/README.md)"
  done
}

closing_notes() {
  echo "# masters publish snapshots to projects/$PROJECT/topics/$SNAPSHOTS" \
    "with the pool name as ordering key (dynagent publish --to projects/$PROJECT/topics/$SNAPSHOTS)"
  echo "# the bridge reads drain notices with" \
    "--drain-notices projects/$PROJECT/subscriptions/$DRAIN_NOTICES"
  [[ -n $BRIDGE_ACCOUNTS ]] ||
    echo "# no --bridge-service-account: grant the publisher roles/pubsub.publisher on" \
      "$SNAPSHOTS and roles/pubsub.subscriber on the subscription $DRAIN_NOTICES"
  [[ -n $ALERT_EMAIL ]] ||
    echo "# no --alert-email: the alert policies notify no one until you add a channel"
  ((DRY_RUN)) && echo "# dry run: nothing was run"
  return 0
}

main() {
  parse_args "$@"
  check_inputs
  if ((DELETE)); then
    delete_deployment
    return
  fi
  read_pools
  name_resources
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/dynagent-gcp-$NAME.XXXXXX")
  # A dry run keeps its staged source and condition files: its commands refer to them.
  ((DRY_RUN)) || trap 'rm -rf "$WORK"' EXIT
  summary
  enable_services
  create_topics
  create_service_account
  grant_compute_role
  grant_service_account_use
  grant_status_labels
  grant_bridge
  stage_source
  deploy_functions
  dead_letter_reconcile_trigger
  schedule_sweep
  create_monitoring
  closing_notes
}

# Sourced (by the tests), it only defines the functions.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  main "$@"
fi
