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
BRIDGE_LIST=()

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
# alone), compute.instances.setTags (network_tags) and compute.subnetworks.useExternalIp
# (network_interface.external_ip). Fields a pool adds through base_config may need more.
BASE_PERMISSIONS=(
  compute.instances.list          # observe: the pool's VMs, by label filter
  compute.instances.get           # read one VM before relabelling it
  compute.instances.create        # launch
  compute.instances.delete        # terminate
  compute.instances.setLabels     # launch with labels; the registered/idle marks
  compute.instances.setMetadata   # launch with the startup script
  compute.disks.create            # the boot disk made with the VM (named after it)
  compute.images.useReadOnly      # boot_disk_source_image in this project
  compute.subnetworks.use         # the network interface's VPC subnetwork
  compute.zoneOperations.get      # wait for insert, delete and setLabels
)

usage() {
  cat <<'EOF'
usage: infra/gcp/deploy.sh --project P --region R --config FILE [options]

  --project P      project for the topics, functions and schedule   ($DYNAGENT_PROJECT)
  --region R       region of the functions and the schedule          ($DYNAGENT_REGION)
  --config FILE    pool config (resource_pools with type: gcp)       ($DYNAGENT_CONFIG_FILE)
  --zone Z         a zone the pools may use; repeat or comma-separate ($DYNAGENT_ZONES)
                   (optional guard: every GCP pool's zone must be listed)
  --name NAME      prefix of every resource's name, default dynagent ($DYNAGENT_NAME)
  --runtime ID     Cloud Functions runtime, default python313        ($DYNAGENT_RUNTIME)
  --bridge-service-account EMAIL
                   may publish snapshots (dynagent bridge's identity); repeatable
                                                   ($DYNAGENT_BRIDGE_SERVICE_ACCOUNT)
  --alert-email ADDRESS
                   an email notification channel for the alert policies
                                                   ($DYNAGENT_ALERT_EMAIL)
  --dry-run        print the gcloud commands, one per line, and run none
  -h, --help       this help
EOF
}

die() {
  echo "deploy.sh: $*" >&2
  exit 2
}

parse_args() {
  while (($#)); do
    case $1 in
      --project) PROJECT=${2:?--project needs a value}; shift ;;
      --region) REGION=${2:?--region needs a value}; shift ;;
      --config) CONFIG=${2:?--config needs a value}; shift ;;
      --zone | --zones) ZONES="${ZONES:+$ZONES,}${2:?--zone needs a value}"; shift ;;
      --name) NAME=${2:?--name needs a value}; shift ;;
      --runtime) RUNTIME=${2:?--runtime needs a value}; shift ;;
      --bridge-service-account)
        BRIDGE_ACCOUNTS="${BRIDGE_ACCOUNTS:+$BRIDGE_ACCOUNTS,}${2:?--bridge-service-account needs a value}"
        shift
        ;;
      --alert-email) ALERT_EMAIL=${2:?--alert-email needs a value}; shift ;;
      --dry-run) DRY_RUN=1 ;;
      -h | --help) usage; exit 0 ;;
      *) usage >&2; die "unknown argument: $1" ;;
    esac
    shift
  done
}

check_inputs() {
  [[ -n $PROJECT ]] || die "--project is required"
  [[ -n $REGION ]] || die "--region is required"
  [[ -n $CONFIG ]] || die "--config is required"
  [[ -f $CONFIG ]] || die "config file $CONFIG not found"
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
  if ((!DRY_RUN)); then
    command -v gcloud >/dev/null || die "gcloud is not on PATH (or use --dry-run)"
  fi
}

is_project_id() {
  [[ $1 =~ ^[a-z][a-z0-9-]{4,28}[a-z0-9]$ ]]
}

# --- the pools ------------------------------------------------------------------------

POOL_NAMES=() POOL_PROJECTS=() POOL_ZONES=() POOL_PREFIXES=() POOL_LABELS=()
PROJECTS_OF_POOLS=() AGENT_ACCOUNTS=() NEEDS_EXTERNAL_IP=0 NEEDS_TAGS=0
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
  local facts kind name project zone prefix key value account external tags
  facts=$(pool_facts "$CONFIG") || die "the pool config $CONFIG cannot be deployed (see above)"
  while IFS=$'\t' read -r kind name project zone prefix key value account external tags; do
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

SNAPSHOTS='' SWEEP_TOPIC='' DEAD_LETTERS='' FN_ACCOUNT='' ROLE_ID='' STATUS_ROLE_ID='' WORK='' SOURCE=''

name_resources() {
  SNAPSHOTS=$NAME-snapshots
  SWEEP_TOPIC=$NAME-sweep
  DEAD_LETTERS=$NAME-dead-letters
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

ensure_topic() {
  exists gcloud pubsub topics describe "$1" --project="$PROJECT" ||
    run gcloud pubsub topics create "$1" --project="$PROJECT"
}

create_topics() {
  ensure_topic "$SNAPSHOTS"
  ensure_topic "$SWEEP_TOPIC"
  ensure_topic "$DEAD_LETTERS"
  # Messages published to a topic without subscriptions are lost: this one keeps the
  # dead letters for a week, and never expires for being idle.
  exists gcloud pubsub subscriptions describe "$DEAD_LETTERS" --project="$PROJECT" ||
    run gcloud pubsub subscriptions create "$DEAD_LETTERS" --topic="$DEAD_LETTERS" \
      --message-retention-duration=7d --expiration-period=never --project="$PROJECT"
}

create_service_account() {
  exists gcloud iam service-accounts describe "$FN_ACCOUNT" --project="$PROJECT" ||
    run gcloud iam service-accounts create "$NAME-fn" --project="$PROJECT" \
      --display-name="dynagent functions ($NAME)" \
      --description="Runs and triggers the $NAME reconcile and sweep functions"
}

role_permissions() {
  local permissions=("${BASE_PERMISSIONS[@]}")
  ((${#AGENT_ACCOUNTS[@]})) && permissions+=(compute.instances.setServiceAccount)
  ((NEEDS_TAGS)) && permissions+=(compute.instances.setTags)
  ((NEEDS_EXTERNAL_IP)) && permissions+=(compute.subnetworks.useExternalIp)
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

grant_compute_role() {
  local project permissions file role
  permissions=$(role_permissions)
  for project in "${PROJECTS_OF_POOLS[@]}"; do
    role=projects/$project/roles/$ROLE_ID
    if exists gcloud iam roles describe "$ROLE_ID" --project="$project"; then
      run gcloud iam roles update "$ROLE_ID" --project="$project" --permissions="$permissions" --quiet
    else
      run gcloud iam roles create "$ROLE_ID" --project="$project" --stage=GA \
        --title="dynagent compute ($NAME)" \
        --description="What the $NAME functions do to Compute Engine" \
        --permissions="$permissions"
    fi
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
  # reconcile sets aside messages it can never apply on the dead-letter topic.
  run_binding gcloud pubsub topics add-iam-policy-binding "$DEAD_LETTERS" --project="$PROJECT" \
    --member="serviceAccount:$FN_ACCOUNT" --role=roles/pubsub.publisher
}

# reconcile keeps each pool's last applied snapshot, summarised, in the snapshot
# topic's labels for `dynagent status`: reading and updating that topic, and no other.
# No predefined role is that narrow (pubsub.editor can delete topics), hence a custom one.
grant_status_labels() {
  local role=projects/$PROJECT/roles/$STATUS_ROLE_ID
  local permissions=pubsub.topics.get,pubsub.topics.update
  if exists gcloud iam roles describe "$STATUS_ROLE_ID" --project="$PROJECT"; then
    run gcloud iam roles update "$STATUS_ROLE_ID" --project="$PROJECT" \
      --permissions="$permissions" --quiet
  else
    run gcloud iam roles create "$STATUS_ROLE_ID" --project="$PROJECT" --stage=GA \
      --title="dynagent status labels ($NAME)" \
      --description="The $NAME reconcile function labels its snapshot topic" \
      --permissions="$permissions"
  fi
  run_binding gcloud pubsub topics add-iam-policy-binding "$SNAPSHOTS" --project="$PROJECT" \
    --member="serviceAccount:$FN_ACCOUNT" --role="$role"
}

# The bridge publishes snapshots and does nothing else: publisher on that topic only.
grant_bridge_publisher() {
  local account
  for account in "${BRIDGE_LIST[@]}"; do
    run_binding gcloud pubsub topics add-iam-policy-binding "$SNAPSHOTS" --project="$PROJECT" \
      --member="serviceAccount:$account" --role=roles/pubsub.publisher
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
    --set-env-vars="DYNAGENT_CONFIG=dynagent.yaml,DYNAGENT_DEAD_LETTER_TOPIC=projects/$PROJECT/topics/$DEAD_LETTERS,DYNAGENT_SNAPSHOT_TOPIC=projects/$PROJECT/topics/$SNAPSHOTS,$(location_env)" \
    --max-instances=1 --concurrency=1 --ingress-settings=internal-only \
    --memory=512Mi --timeout=300s "$@" --quiet
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
      --description="dynagent ($NAME): sweep every pool every minute"
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

# The files come from the metrics CATALOG (monitoring.py); the functions log each point
# as {"message": "dynagent metric", "metric": ..., "value": ..., "pool": ..., ...}.
create_monitoring() {
  local manifest kind key file
  notification_channel
  manifest=$("$(python_for_facts)" "$HERE/monitoring.py" "$WORK/monitoring" "$NAME" "$CHANNEL") ||
    die "could not write the monitoring files"
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
  [[ -n $BRIDGE_ACCOUNTS ]] ||
    echo "# no --bridge-service-account: grant the publisher roles/pubsub.publisher on $SNAPSHOTS"
  [[ -n $ALERT_EMAIL ]] ||
    echo "# no --alert-email: the alert policies notify no one until you add a channel"
  ((DRY_RUN)) && echo "# dry run: nothing was run"
  return 0
}

main() {
  parse_args "$@"
  check_inputs
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
  grant_bridge_publisher
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
