from attnq.cli import main

raise SystemExit(main())
